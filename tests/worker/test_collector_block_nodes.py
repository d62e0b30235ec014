"""The collector reads the node of a Ray actor block as check-log does (issue 24: the node from the structure)."""

import os
import shutil
from pathlib import Path

from app.domain.detection.signatures import NODE_FAIL, CrashSignature
from app.jobfiles.reader import FilePosition, LogTailer
from app.jobfiles.safe_open import AccessRule
from worker.collector.discovery import Tracked
from worker.collector.reading import read_files

HOLDOUT3 = Path(__file__).resolve().parents[1] / "fixtures" / "realworld-holdout3"


def test_the_closing_line_of_a_ray_actor_block_gets_the_node_its_ip_field_names(tmp_path: Path) -> None:
    # ray-project/ray#43751: "\tip: 10.72.56.3" then "The actor is dead because its node has died."
    path = tmp_path / "train.log"
    shutil.copy(HOLDOUT3 / "ray-train-actor-node-died-001.log", path)
    tailer = LogTailer()
    mine = AccessRule(uid=os.getuid())
    reads, _ = read_files(tailer, [Tracked(1, str(path), None, None, False, FilePosition(str(path)))], lambda _: mine)
    tailer.close()
    lost = [
        e.signal
        for read in reads
        for e in read.events
        if isinstance(e.signal, CrashSignature) and e.signal.category == NODE_FAIL
    ]
    assert lost and lost[0].nodes == ("10.72.56.3",)
