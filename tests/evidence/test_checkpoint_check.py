"""Checkpoint checks on real-shaped directory trees: each framework's complete save, and the ways it is not."""

from __future__ import annotations

import json
import os
from pathlib import Path

from app.domain.decision.checkpoint_rules import CheckResult, CheckStatus
from app.jobfiles.checkpoint_probe import check_path
from app.jobfiles.safe_open import AccessRule


def write(path: Path, data: bytes | str = b"x" * 64) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def megatron(root: Path, iteration: int = 500, *, tp: int = 2) -> Path:
    save = root / "gpt3"
    for rank in range(tp):
        write(save / f"iter_{iteration:07d}" / f"mp_rank_{rank:02d}" / "model_optim_rng.pt")
    write(save / "latest_checkpointed_iteration.txt", str(iteration))
    return save


def check(path: Path | str, root: Path, framework: str, **kwargs: object) -> CheckResult:
    return check_path(str(path), framework=framework, roots=[str(root)], **kwargs)  # type: ignore[arg-type]


def test_megatron_complete_save_dir(tmp_path: Path) -> None:
    result = check(megatron(tmp_path), tmp_path, "megatron", recorded_iteration=500)
    assert result.status is CheckStatus.OK, result.message
    assert result.iteration == 500 and result.layout == "Megatron-LM"


def test_megatron_tracker_names_a_missing_iteration_dir(tmp_path: Path) -> None:
    save = megatron(tmp_path, 500)
    write(save / "latest_checkpointed_iteration.txt", "1000")
    result = check(save, tmp_path, "megatron")
    assert result.status is CheckStatus.INCOMPLETE and "iter_0001000" in result.message


def test_megatron_tracker_older_than_the_logged_save(tmp_path: Path) -> None:
    result = check(megatron(tmp_path, 500), tmp_path, "megatron", recorded_iteration=1000)
    assert result.status is CheckStatus.INCOMPLETE and "older than the saved iteration 1000" in result.message


def test_megatron_distributed_format_without_metadata_is_incomplete(tmp_path: Path) -> None:
    save = tmp_path / "gpt3"
    write(save / "iter_0000500" / "__0_0.distcp")
    write(save / "latest_checkpointed_iteration.txt", "500")
    assert check(save, tmp_path, "megatron").status is CheckStatus.INCOMPLETE
    write(save / "iter_0000500" / ".metadata")
    assert check(save, tmp_path, "megatron").status is CheckStatus.OK


def test_megatron_without_tracker(tmp_path: Path) -> None:
    save = megatron(tmp_path)
    (save / "latest_checkpointed_iteration.txt").unlink()
    result = check(save / "iter_0000500", tmp_path, "megatron")
    assert result.status is CheckStatus.INCOMPLETE and "latest_checkpointed_iteration.txt" in result.message


def test_deepspeed_file_tag_dir_and_save_dir(tmp_path: Path) -> None:
    save = tmp_path / "ds"
    write(save / "global_step500" / "mp_rank_00_model_states.pt")
    write(save / "global_step500" / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    write(save / "latest", "global_step500")
    assert check(save, tmp_path, "deepspeed").status is CheckStatus.OK
    assert check(save / "global_step500", tmp_path, "deepspeed").iteration == 500
    assert check(save / "global_step500" / "mp_rank_00_model_states.pt", tmp_path, "deepspeed").loadable
    write(save / "latest", "global_step600")
    assert check(save, tmp_path, "deepspeed").status is CheckStatus.INCOMPLETE
    assert check(save / "global_step500", tmp_path, "deepspeed").status is CheckStatus.INCOMPLETE


def test_hf_trainer_checkpoint(tmp_path: Path) -> None:
    ckpt = tmp_path / "out" / "checkpoint-500"
    for name in ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin"):
        write(ckpt / name)
    write(ckpt / "trainer_state.json", json.dumps({"global_step": 500, "epoch": 0.5, "log_history": []}))
    result = check(ckpt, tmp_path, "hf_trainer")
    assert result.status is CheckStatus.OK and result.iteration == 500
    write(ckpt / "trainer_state.json", '{"global_step": 5')  # cut off mid-write
    assert check(ckpt, tmp_path, "hf_trainer").status is CheckStatus.INCOMPLETE


def test_torch_distributed_checkpoint(tmp_path: Path) -> None:
    step = tmp_path / "checkpoint" / "step-100"
    write(step / "__0_0.distcp")
    write(step / "__1_0.distcp")
    assert check(step, tmp_path, "torchtitan").status is CheckStatus.INCOMPLETE  # .metadata is written last
    write(step / ".metadata")
    assert check(step, tmp_path, "torchtitan").status is CheckStatus.OK


def test_lightning_ckpt_must_be_non_empty(tmp_path: Path) -> None:
    ckpt = write(tmp_path / "epoch=3-step=1200.ckpt", b"")
    assert check(ckpt, tmp_path, "lightning").status is CheckStatus.INCOMPLETE
    write(ckpt, b"PK" * 100)
    assert check(ckpt, tmp_path, "lightning").status is CheckStatus.OK


def test_missing_path_is_no_loadable_checkpoint(tmp_path: Path) -> None:
    result = check(tmp_path / "gone", tmp_path, "pytorch")
    assert result.status is CheckStatus.MISSING and not result.loadable
    assert result.message.startswith("no loadable checkpoint")


def test_not_newer_than_the_previous_attempt(tmp_path: Path) -> None:
    save = megatron(tmp_path, 500)
    first = check(save, tmp_path, "megatron")
    again = check(save, tmp_path, "megatron", previous=first)
    assert again.status is CheckStatus.NOT_NEWER and not again.loadable
    later = megatron(tmp_path, 600)
    assert check(later, tmp_path, "megatron", previous=first).status is CheckStatus.OK


def test_never_follows_symlinks_out_of_the_roots(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    megatron(outside)
    root.mkdir()
    os.symlink(outside / "gpt3", root / "gpt3")
    result = check(root / "gpt3", root, "megatron")
    assert result.status is CheckStatus.UNCHECKED and "configured roots" in result.message
    # a shard symlinked out of the roots is not followed: the iteration holds nothing loadable
    save = megatron(root / "inside")
    shard = save / "iter_0000500" / "mp_rank_00" / "model_optim_rng.pt"
    shard.unlink()
    (save / "iter_0000500" / "mp_rank_01" / "model_optim_rng.pt").unlink()
    os.symlink(outside / "gpt3" / "iter_0000500" / "mp_rank_00" / "model_optim_rng.pt", shard)
    assert check(save, root, "megatron").status is CheckStatus.INCOMPLETE
    # outside every root, and without roots: not looked at
    assert check(outside / "gpt3", root, "megatron").status is CheckStatus.UNCHECKED
    assert check_path(str(save), framework="megatron", roots=[]).status is CheckStatus.UNCHECKED


def test_no_path_and_budget(tmp_path: Path) -> None:
    assert check_path(None, framework="deepspeed", roots=[str(tmp_path)]).status is CheckStatus.UNCHECKED
    ckpt = tmp_path / "many"
    for i in range(30):
        write(ckpt / f"d{i}" / "f.bin")
    result = check_path(str(ckpt), framework="unknown", roots=[str(tmp_path)], max_entries=10)
    assert result.status is CheckStatus.UNCHECKED and "budget" in result.message


def test_result_round_trips_through_its_stored_form(tmp_path: Path) -> None:
    result = check(megatron(tmp_path), tmp_path, "megatron")
    assert CheckResult.from_dict(result.as_dict()) == result
    assert CheckResult.from_dict({"status": "nonsense"}) is None


def test_symlinks_inside_the_roots_are_not_followed_either(tmp_path: Path) -> None:
    save = megatron(tmp_path / "real")
    os.symlink(save, tmp_path / "gpt3")  # inside the root, pointing inside the root: still not followed
    assert check(tmp_path / "gpt3", tmp_path, "megatron").status is CheckStatus.UNCHECKED
    os.symlink(tmp_path / "real", tmp_path / "via")  # a symlinked directory on the way
    via = check(tmp_path / "via" / "gpt3", tmp_path, "megatron")
    assert via.status is CheckStatus.UNCHECKED and via.message.startswith("not looked at (symlink)")
    # the marker file as a symlink to another user's secret: never opened
    secret = tmp_path / "secret"
    secret.write_text("500")
    tracker = save / "latest_checkpointed_iteration.txt"
    tracker.unlink()
    os.symlink(secret, tracker)
    result = check(save, tmp_path, "megatron")
    assert result.status is not CheckStatus.OK


def test_only_what_the_jobs_user_owns_is_looked_at(tmp_path: Path) -> None:
    save = megatron(tmp_path)
    me = check_path(str(save), framework="megatron", roots=[str(tmp_path)], access=AccessRule(uid=os.getuid()))
    assert me.status is CheckStatus.OK
    stranger = AccessRule(uid=os.getuid() + 4242)
    other = check_path(str(save), framework="megatron", roots=[str(tmp_path)], access=stranger)
    assert other.status is CheckStatus.UNCHECKED and other.layout is None
    unknown = check_path(str(save), framework="megatron", roots=[str(tmp_path)], access=AccessRule(uid=None))
    assert unknown.status is CheckStatus.UNCHECKED and unknown.message.startswith("not looked at (uid-unknown)")
