"""Slurm's task layout from squeue JSON: what maps a rank to its node (SLURM_TASKS_PER_NODE form)."""

import pytest

from app.slurm.parse import parse_job, task_layout


@pytest.mark.parametrize(
    "per_node,total,nodes,layout",
    [
        (4, None, 2, "4(x2)"),
        (8, None, 1, "8"),
        (None, 8, 2, "4(x2)"),
        (None, 5, 2, "3,2"),
        (None, 7, 3, "3,2(x2)"),
        (None, 1, 2, None),  # fewer tasks than nodes: not a block layout we can state
        (None, None, 2, None),
        (4, None, 0, None),
    ],
)
def test_task_layout(per_node, total, nodes, layout):
    assert task_layout(per_node, total, nodes) == layout


def test_parse_job_records_the_layout_from_tasks_per_node_or_tasks():
    base = {"job_id": 7, "job_state": ["RUNNING"], "nodes": "gpu[1-2]"}
    assert (
        parse_job({**base, "tasks_per_node": {"set": True, "infinite": False, "number": 4}}).tasks_per_node == "4(x2)"
    )
    assert parse_job({**base, "tasks": {"set": True, "infinite": False, "number": 16}}).tasks_per_node == "8(x2)"
    assert parse_job({**base, "tasks_per_node": {"set": False, "infinite": False, "number": 0}}).tasks_per_node is None
