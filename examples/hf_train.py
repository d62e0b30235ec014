#!/usr/bin/env python3
"""A real Hugging Face Trainer run on CPU: a tiny GPT-2 built in code (nothing downloaded) on random tokens.

Everything it prints about progress and checkpoints is the library's own: tqdm bars, the Trainer's
`{'loss': ..., 'grad_norm': ..., 'learning_rate': ..., 'epoch': ...}` lines, `Saving model checkpoint to
<dir>/checkpoint-N` every --save-steps steps, and on a retry `Resuming training from checkpoint with epoch E
and global step N` when <dir> holds a checkpoint.

Failures, for demos and tests, at step --fault-step on the attempts --fault-attempts names
(SLURM_RESTART_COUNT; default the first only, so the retry succeeds):
  --fault raise   a callback raises a ValueError, as a corrupt sample in the data pipeline would
  --fault nan     the weights turn to NaN: the Trainer logs 'grad_norm': 'nan' from then on (and 'loss': '0':
                  its default logging_nan_inf_filter leaves non-finite losses out of the average)
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)
from transformers.trainer_utils import get_last_checkpoint

VOCAB = 128
LENGTH = 32


class RandomTokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Fixed random token sequences: a language-modelling data set that needs no download."""

    def __init__(self, size: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.tokens = torch.randint(0, VOCAB, (size, LENGTH), generator=generator)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.tokens[index], "labels": self.tokens[index]}


class Fault(TrainerCallback):
    """Breaks the run at one step: raises, or turns the weights to NaN."""

    def __init__(self, kind: str, step: int) -> None:
        self.kind, self.step = kind, step

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if state.global_step + 1 != self.step:
            return
        if self.kind == "raise":
            raise ValueError(f"corrupt sample in shard train-00003.jsonl: expected {LENGTH} tokens, got 0")
        if self.kind == "nan":
            with torch.no_grad():
                for parameter in kwargs["model"].parameters():
                    parameter.fill_(math.nan)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module's docstring)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--output-dir", default=os.environ.get("CHECKPOINT_DIR", "hf-output"))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--save-steps", type=int, default=5)
    parser.add_argument("--fault", choices=("none", "raise", "nan"), default="none")
    parser.add_argument("--fault-step", type=int, default=8)
    parser.add_argument("--fault-attempts", default="0", help="comma-separated attempt numbers, or 'all'")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Train (resuming from the newest checkpoint in --output-dir); return the exit code."""
    args = parse(argv)
    attempt = os.environ.get("SLURM_RESTART_COUNT") or "0"
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=32, n_layer=2, n_head=2)
    model = GPT2LMHeadModel(config)
    training = TrainingArguments(
        output_dir=args.output_dir,
        max_steps=args.steps,
        per_device_train_batch_size=8,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="steps",
        save_steps=args.save_steps,
        report_to="none",
        use_cpu=True,
        dataloader_num_workers=0,
        log_level="info",
        disable_tqdm=False,
        seed=0,
    )
    callbacks: list[TrainerCallback] = []
    if args.fault != "none" and (args.fault_attempts == "all" or attempt in args.fault_attempts.split(",")):
        callbacks.append(Fault(args.fault, args.fault_step))
    trainer = Trainer(model=model, args=training, train_dataset=RandomTokens(256), callbacks=callbacks)
    last = get_last_checkpoint(args.output_dir) if os.path.isdir(args.output_dir) else None
    trainer.train(resume_from_checkpoint=last)
    return 0


if __name__ == "__main__":
    sys.exit(main())
