"""Structural rules: what a line says by its shape, whatever framework printed it.

Checkpoint save/load verbs near "checkpoint"/"ckpt" (the step from the line, else from the path),
a non-finite value in any printed metric field, and collective timeouts of every backend (NCCL,
gloo, c10d store, rendezvous) as one category. These come after the framework rules, which keep
their more precise fields; they catch the formats no rule was written for.
"""

from __future__ import annotations

from app.domain.detection.signatures import CUDA_OOM, HOST_OOM, NAN_LOSS, NCCL_ERROR, NCCL_TIMEOUT, Rule


def _rule(
    kind: str, name: str, label: str, anchors: tuple[str, ...], pattern: str, example: str, exclude: str = ""
) -> Rule:
    return Rule(name=name, kind=kind, anchors=anchors, pattern=pattern, label=label, example=example, exclude=exclude)


_CKPT_ANCHORS = ("heckpoint", "HECKPOINT", "ckpt")
# Not an event: failures, plans and settings ("will be saved", "every 500 steps"), pretrained weights
# ("Loading checkpoint shards"), code quoted in a traceback (`torch.load(ckpt)`), a missing checkpoint.
_CKPT_NOT = (
    r"(?i:\b(?:fail(?:s|ed|ure)?|error|unable|cannot|can't|could not|couldn't|not found|no checkpoint|"
    r"does not exist|doesn't exist|skip(?:s|ping|ped)?|will be|every\s+\d+|interval|frequency|deprecat\w*|"
    r"missing keys|unexpected keys|checkpoint shards|pretrained|warning|"
    r"not supported|unsupported|(?:not|no) resum\w*)\b)|\w\(|^\s*File \""
)

STRUCTURE_CHECKPOINT_RULES: tuple[Rule, ...] = (
    _rule(
        "checkpoint",
        "generic_checkpoint_saved",
        "saved",
        (*_CKPT_ANCHORS, "odel saved ", "eights saved ", "napshot saved "),
        r"(?i:\b(?:sav(?:e|ed|ing)|stor(?:ed|ing)|wr(?:ote|iting|itten))\b[^\n]{0,60}?(?:checkpoint|ckpt)"
        r"|(?:checkpoint|ckpt)\w*\b[^\n]{0,60}?\b(?:saved|written|stored)\b"
        r"|\b(?:[Mm]odel|[Ww]eights|[Ss]napshot) (?:saved|written|stored) (?:to|in|at|into) \S)",
        "Saving checkpoint for step 1200",
        exclude=_CKPT_NOT + r"|(?i:\b(?:load(?:ed|ing)?|resum(?:e|ed|ing)|restor(?:e|ed|ing))\b[^\n]{0,30}?\bsaved\b)",
    ),
    _rule(
        "checkpoint",
        "generic_checkpoint_loaded",
        "loaded",
        (*_CKPT_ANCHORS, "esum", "estor", "ESUM"),  # "Initializing from cv/checkpoint_20.t7": "heckpoint"
        r"(?i:\b(?:load(?:ed|ing)?|resum(?:e|ed|ing)|restor(?:e|ed|ing))\b[^\n]{0,60}?(?:checkpoint|ckpt)"
        r"|(?:checkpoint|ckpt)\w*\b[^\n]{0,60}?\b(?:loaded|restored|resumed)\b"
        r"|\b(?:load(?:ed|ing)?|resum(?:e|ed|ing)|restor(?:e|ed|ing))\b[^\n]{0,40}?\s['\"]?[\w./~=+-]*(?:checkpoint|ckpt)"
        r"|\bresum(?:ed|ing)\b[^\n]{0,30}?\b(?:from|at)\b[^\n]{0,40}?(?:step|iter|epoch)[\s_=:-]*\d"
        r"|\bresum(?:e|ed|ing)\s+(?:training\s+)?from\s+\S*[/\\]|\bresum(?:ed|ing) training\b"
        r"|\bresumed\b[^\n]{0,30}?\b(?:iter|iteration|step|global_step)\s*[:=]?\s*\d"
        r"|\b(?:initiali[sz](?:e|ed|ing)|init|warm[- ]?start(?:ed|ing)?)(?:[_ ]from|\s+\w+\s+from)\b"
        r"[^\n]{0,80}?(?:checkpoint|ckpt))",
        "loaded checkpoint from /ckpt/iter_15.pt at iteration 15",
        exclude=_CKPT_NOT,
    ),
    # A load that failed is still an attempt to resume from that checkpoint (the crash rules record the failure):
    # "failed to resume from checkpoint <path>", "Unable to load optimizer from checkpoint <path>". It must name
    # the checkpoint's path; code quoted in a traceback (`raise ValueError(f"...")`) is not an attempt.
    _rule(
        "checkpoint",
        "generic_checkpoint_load_failed",
        "loaded",
        _CKPT_ANCHORS,
        r"(?i:\b(?:fail(?:ed|ure)|unable|could not|couldn't|cannot|can't) (?:to )?(?:load|resume|restore)\b"
        r"[^\n]{0,40}?\b(?:checkpoint|ckpt)\b\s+['\"]?(?P<path>[~.]{0,2}/[^\s'\",]+))",
        "ValueError: [deepspeed] failed to resume from checkpoint /input1/lufan/lumos_vl_checkpoints/RDM/"
        "rdm-siglip-qwen-7b-sft737k-4nodes-NoNorm-0.2w0.2w/checkpoint-5439",
        exclude=r"\w\(|^\s*File \"",
    ),
)

# A non-finite value printed as a metric: `key: nan`, `key=nan`, `'key': 'nan'`, `loss nan |`, a table cell
# `| nan |`. Never prose: the value must not be followed by a lower-case word ("NaN detected in ...",
# "nan iterations") and a value in parentheses (a running average "(nan)") is not a field.
_NONFINITE = r"[-+]?(?:nan|NaN|NAN|inf|Inf|INF)\b(?!\s+[a-z]{2,})(?![\w.-])"
_METRIC_WORD = r"(?i:\b(?:loss|norm|grad_norm|ppl|perplexity|reward|acc|accuracy|lr|kl|entropy|score))"
_NAN_ANCHORS = tuple(
    f"{before}{value}{after}"
    for value in ("nan", "NaN", "inf", "Inf")
    for before, after in (
        (": ", ""),
        (":", ""),
        ("=", ""),
        ("= ", ""),
        (": '", ""),
        (': "', ""),
        (": -", ""),
        ("=-", ""),
        (" ", " |"),
        (" ", ","),
        (" ", ";"),
        (" ", "\t"),
        (" ", "  "),
        (" ", "\n"),
        ("| ", ""),
        ("|", ""),
    )
)

STRUCTURE_NAN_RULES: tuple[Rule, ...] = (
    _rule(
        "crash",
        "nan_metric",
        NAN_LOSS,
        _NAN_ANCHORS,
        r"(?:[A-Za-z][\w./-]*['\"]?(?:\s*\([^)]*\))?\s*[:=]\s*['\"]?|" + _METRIC_WORD + r"\s+|\|\s*)" + _NONFINITE,
        "iteration 6 | loss nan | grad norm nan | lr 5.00E-02 | step time 0.208 s",
        exclude=r"\*\*\*WARNING\*\*\*|[Ss]kipping (?:this )?(?:step|batch|iteration)",
    ),
)

STRUCTURE_CRASH_RULES: tuple[Rule, ...] = (
    _rule(
        "crash",
        "collective_timeout",
        NCCL_TIMEOUT,
        ("Timed out waiting ", "DistBackendError", "RendezvousTimeoutError", "timed out after ", "Timed out after "),
        r"\bTimed out waiting \d+ ?ms for \w+ operation|RendezvousTimeoutError\b"
        r"|DistBackendError\b[^\n]*(?i:timed? ?out|timeout)"
        r"|(?i:\b(?:store|rendezvous|barrier|collective|allreduce|all_reduce|broadcast|monitoredBarrier)\b[^\n]{0,80}"
        r"\btimed out after \d+)",
        "[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
        "Timed out waiting 30000ms for recv operation to complete",
    ),
    _rule(
        "crash",
        "device_resource_exhausted",
        CUDA_OOM,
        (
            "RESOURCE_EXHAUSTED: Out of memory",
            "RESOURCE_EXHAUSTED: Failed to allocate",
            "RESOURCE_EXHAUSTED: Attempting to reserve",
            "CUDA_ERROR_OUT_OF_MEMORY",
        ),
        r"RESOURCE_EXHAUSTED: (?:Out of memory|Failed to allocate|Attempting to reserve \S+ at the \w+ of memory)"
        r"|CUDA_ERROR_OUT_OF_MEMORY",
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.00GiB.",
    ),
    _rule(
        "crash",
        "accelerator_out_of_memory",
        CUDA_OOM,
        ("out of memory", "OutOfMemory", "ErrorMemoryAllocation"),
        r"\b(?:CUDA|HIP|ROCm|NPU|XPU|MPS|GPU|TPU|HBM|[Dd]evice)\b[^\n]{0,40}?\b[Oo]ut of memory\b"
        r"|\b(?:hip|cuda)Error(?:OutOfMemory|MemoryAllocation)\b|\b(?:HIP|NPU|XPU)?OutOfMemoryError\b",
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 MiB. GPU 7 has a total capacity of 287.98 GiB",  # noqa: E501 - quoted as printed
    ),
    _rule(
        "crash",
        "memory_pressure_kill",
        HOST_OOM,
        ("due to memory pressure", "killed due to memory"),
        r"[Kk]illed due to memory pressure|killed due to memory",
        "killed due to memory pressure (OOM)",
    ),
    _rule(
        "crash",
        "nccl_warn_result",
        NCCL_ERROR,
        ("NCCL WARN",),
        r"NCCL WARN .*-> [1-6]\b",
        "NCCL WARN … -> 5",
    ),
)
