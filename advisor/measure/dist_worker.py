"""One rank of a distributed trial, started by torchrun (``python -m torch.distributed.run``).

The parent (:func:`advisor.measure.trial.run_distributed_trial`) writes a spec JSON and starts
``torchrun --standalone --nproc-per-node N -m advisor.measure.dist_worker SPEC``; every rank joins the
process group (NCCL on CUDA, gloo on the CPU: https://pytorch.org/docs/stable/distributed.html),
wraps the model as planned and runs the same loop as a one-device trial:

- ``ddp``: ``DistributedDataParallel`` (https://pytorch.org/docs/stable/notes/ddp.html), with
  ``no_sync()`` on all but the last micro-batch of an accumulation;
- ``zero-2`` / ``zero-3``: FSDP2's ``fully_shard`` on every transformer block and the root
  (https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html), ``reshard_after_forward``
  False (SHARD_GRAD_OP, ZeRO-2's counterpart) or True (FULL_SHARD, ZeRO-3's).

The spec is a :class:`advisor.measure.outcome.TrialSpec`. Rank 0 prints a ``StepEvent`` JSON line
per step on stdout (the parent's progress); each rank writes ``rank<R>.json`` (a ``RankOutcome``)
with its measurements, then prints a ``RankDoneEvent`` line. A stop is a file the parent creates; the ranks agree on it
at each step boundary (an all-reduce), so all stop at the same step. A failed rank exits 1, and
torchrun tears the others down.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel

from advisor.core.vocabulary import Device, Parallelism

#: The plans a distributed trial runs: DDP, and sharding through FSDP2 (every strategy run by torch,
#: DeepSpeed or FSDP that the vocabulary does not trial as another one: ZeRO-2 / SHARD_GRAD_OP keep the
#: parameters gathered between forward and backward; ZeRO-3 / FULL_SHARD reshard; HYBRID_SHARD on one
#: node is FULL_SHARD): ddp, zero-2, zero-3, fsdp-shard-grad-op, fsdp-full-shard, fsdp-hybrid-shard.
KINDS = tuple(p.value for p in Parallelism if p is not Parallelism.NONE and p.spec.trial_as is None)


def shards_dtensors(kind: str | None) -> bool:
    """Whether a trial of ``kind`` holds its parameters as DTensors: every sharded kind (FSDP2's ``fully_shard``,
    :meth:`Distributed.wrap`), not DDP nor one device (None); such a trial builds the optimizer the emitted files run
    under FSDP2 (:func:`advisor.measure.trainable.make_optimizer`, ``dtensors``)."""
    return kind is not None and kind != Parallelism.DDP and kind in KINDS


def reshards(kind: str) -> bool:
    """FSDP2's ``reshard_after_forward`` for a sharded kind: True where the parameters are sharded (stage 3)."""
    return Parallelism(kind).stage == 3


class Distributed:
    """This rank's view of the process group, and how the loop uses it."""

    def __init__(self, torch, kind: str, cuda: bool, stop_file: Path) -> None:
        self.torch, self.kind, self.cuda, self.stop_file = torch, kind, cuda, stop_file
        self.rank = int(os.environ["RANK"])
        self.world_size = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ["LOCAL_RANK"])
        if cuda:
            torch.cuda.set_device(self.local_rank)
        self.device = torch.device(f"{Device.CUDA}:{self.local_rank}") if cuda else torch.device(Device.CPU.value)
        torch.distributed.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(minutes=5))
        self.sync_share: float | None = None

    @property
    def shards(self) -> bool:
        """The parameters are FSDP2's DTensors (:func:`shards_dtensors`)."""
        return shards_dtensors(self.kind)

    def wrap(self, net):
        """DDP, or FSDP2 on each transformer block and the root."""
        torch = self.torch
        if self.kind == Parallelism.DDP:
            return torch.nn.parallel.DistributedDataParallel(net, device_ids=[self.local_rank] if self.cuda else None)
        from torch.distributed.fsdp import fully_shard

        reshard = reshards(self.kind)
        for module in net.modules():
            if (
                isinstance(module, torch.nn.ModuleList)
                and len(module) > 1
                and len({type(block) for block in module}) == 1
            ):
                for block in module:
                    fully_shard(block, reshard_after_forward=reshard)
        fully_shard(net, reshard_after_forward=reshard)
        return net

    def sync(self, net, last: bool):
        """The context of one micro-batch: gradients are synchronised on the last one only."""
        if self.kind == Parallelism.DDP:
            return contextlib.nullcontext() if last else net.no_sync()
        net.set_requires_gradient_sync(last)
        return contextlib.nullcontext()

    def agree(self, stopping: bool) -> bool:
        """True on every rank when any rank, or the parent's stop file, says stop."""
        torch = self.torch
        flag = torch.tensor([1.0 if stopping or self.stop_file.exists() else 0.0], device=self.device)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        return bool(flag.item())

    def mean(self, value: float) -> float:
        """The mean of a number over the ranks (the step's loss)."""
        torch = self.torch
        t = torch.tensor([value], device=self.device, dtype=torch.float64)
        torch.distributed.all_reduce(t)
        return float(t.item()) / self.world_size

    def measure_sync_share(self, net, forward, batch: dict, device, dtype) -> None:
        """The gradient synchronisation's share of a micro-batch: 1 − (forward + backward without
        sync) / (with sync), medians of 3 each, after the timed steps."""
        torch = self.torch

        def timed(last: bool) -> float:
            data = {k: v.to(device) for k, v in batch.items()}
            self.barrier()
            start = time.perf_counter()
            with self.sync(net, last), torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                forward(**data).loss.backward()
            if self.cuda:
                torch.cuda.synchronize()
            return time.perf_counter() - start

        with_sync = statistics.median(timed(True) for _ in range(3))
        without = statistics.median(timed(False) for _ in range(3))
        for p in net.parameters():
            p.grad = None
        self.sync_share = max(0.0, 1.0 - without / with_sync) if with_sync > 0 else None

    def barrier(self) -> None:
        self.torch.distributed.barrier()

    def close(self) -> None:
        if self.torch.distributed.is_initialized():
            self.torch.distributed.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    """Run this rank from the spec file (a ``TrialSpec``) named by the first argument; the exit status."""
    import torch

    from advisor.measure.outcome import RankDoneEvent, RankOutcome, StepEvent, TrialSpec
    from advisor.measure.trial import run_spec

    spec_path = Path((argv or sys.argv[1:])[0])
    spec = TrialSpec.model_validate_json(spec_path.read_text())
    folder = spec_path.parent
    dist = Distributed(torch, spec.kind, spec.plan.device == Device.CUDA, folder / "stop")

    def on_step(update) -> None:
        if dist.rank == 0:
            _emit(StepEvent(update=update))

    try:
        outcome = run_spec(spec, on_step=on_step, stop=threading.Event(), dist=dist)
        result = RankOutcome(
            rank=dist.rank,
            world_size=dist.world_size,
            **outcome.model_dump(exclude={"ranks", "sync_share"}),
            sync_share=dist.sync_share,
        )
        (folder / f"rank{dist.rank}.json").write_text(result.model_dump_json())
        _emit(RankDoneEvent(rank=dist.rank, status=outcome.status))
    finally:
        if "outcome" in locals() and outcome.status in ("ok", "interrupted"):
            dist.close()
    if outcome.status not in ("ok", "interrupted"):
        os._exit(1)  # the other ranks may wait in a collective: torchrun tears them down
    return 0


def _emit(event: BaseModel) -> None:
    """One progress line on stdout, for the parent (a short line: ranks' lines do not interleave)."""
    sys.stdout.write(event.model_dump_json() + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
