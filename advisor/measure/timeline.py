"""The simulated step's memory over time, by kind: every allocation and free of the fake-tensor step
(:mod:`advisor.measure.simulate`), each allocation labelled weights, gradients, optimizer states, activations or
temporaries, as PyTorch's memory visualiser draws a real run's snapshot ("Understanding CUDA Memory Usage",
https://pytorch.org/docs/stable/torch_cuda_memory.html, "Active Memory Timeline") and as
``torch.distributed._tools.mem_tracker.MemTracker`` labels memory by kind (params, grads, activations, optimizer
state, temporaries).

How an allocation gets its kind (the labels hold for its whole life, and are settled when the step is over):

- built with the model (parameters and buffers): weights; the batch: activations (the embedding and the loss keep it
  for backward); what the build frees again (initialisation's scratch): temporaries;
- made in a forward pass: activations when still alive as the forward pass ends (saved for backward, the logits),
  temporaries when freed within it;
- the tensor a parameter's ``.grad`` holds once accumulated (a post-accumulate-grad hook): gradients;
- a tensor of an optimizer's ``state``: optimizer states;
- anything else made in backward or in the optimizer step (activation gradients, recomputed activations under
  checkpointing, the fp32 cast of a gradient, the step's foreach buffers): temporaries.

Torch-free (the simulation fills it; the picture, :mod:`advisor.app.timeline`, reads it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: The kinds, bottom of the stack first (the order of the picture's series and legend).
KINDS = ("weights", "gradients", "optimizer_states", "activations", "temporaries")
#: Where an allocation made in each phase starts (the hooks and the end of each forward pass relabel it).
PHASE_KIND = {"build": "weights", "forward": "activations", "backward": "temporaries", "optimizer": "temporaries"}
#: The phase whose allocations are not part of the step (the model and batch being built): its peak is not the step's.
BUILD = "build"


@dataclass
class Column:
    """The live bytes by kind at one moment (one event of the timeline)."""

    event: int  #: the event's index in the timeline (allocations and frees in order)
    phase: str  #: the phase then: build, forward, backward or optimizer
    by_kind: dict[str, int]  #: live bytes of each kind of :data:`KINDS`, bytes

    @property
    def total(self) -> int:
        """Live bytes of every kind, bytes."""
        return sum(self.by_kind.values())


@dataclass
class Peak(Column):
    """The step's peak: the first event where the live bytes reach their most (the build excluded)."""

    op: str = ""  #: the ATen operator whose allocation reached it, e.g. ``aten.mm.default``


@dataclass
class MemoryTimeline:
    """Every allocation and free of a simulated run, in order, and each allocation's size, kind and operator."""

    sizes: list[int] = field(default_factory=list)  #: bytes of allocation i
    kinds: list[str] = field(default_factory=list)  #: kind of allocation i (one of :data:`KINDS`)
    ops: list[str] = field(default_factory=list)  #: the ATen operator that made allocation i
    events: list[int] = field(default_factory=list)  #: i + 1 when allocation i is made, -(i + 1) when it is freed
    phases: list[str] = field(default_factory=list)  #: the phase of each event
    marks: list[tuple[int, str]] = field(default_factory=list)  #: (first event, phase) of each phase in order
    made_in: list[int] = field(default_factory=list)  #: the mark (index into ``marks``) allocation i was made in

    def allocate(self, nbytes: int, op: str, phase: str) -> int:
        """Record a new allocation of ``nbytes`` made by ``op`` in ``phase``; return its index."""
        index = len(self.sizes)
        self.sizes.append(nbytes)
        self.kinds.append(PHASE_KIND[phase])
        self.ops.append(op)
        self._event(index + 1, phase)
        self.made_in.append(len(self.marks) - 1)
        return index

    def free(self, index: int, phase: str) -> None:
        """Record that allocation ``index`` was freed in ``phase``: one made in the build or the forward pass still
        running, and not labelled since, was a temporary."""
        running = phase in ("build", "forward") and self.marks and self.marks[-1][1] == phase
        if running and self.made_in[index] == len(self.marks) - 1 and self.kinds[index] == PHASE_KIND[phase]:
            self.kinds[index] = "temporaries"
        self._event(-(index + 1), phase)

    def label(self, index: int, kind: str) -> None:
        """Give allocation ``index`` the kind ``kind`` for its whole life (a gradient, an optimizer state)."""
        self.kinds[index] = kind

    def _event(self, code: int, phase: str) -> None:
        if not self.marks or self.marks[-1][1] != phase:
            self.marks.append((len(self.events), phase))
        self.events.append(code)
        self.phases.append(phase)

    def stride(self, most: int) -> int:
        """Events per column when at most ``most`` columns show them all (:meth:`columns`).

        Raises:
            ValueError: ``most`` < 1."""
        if most < 1:
            raise ValueError(f"most must be >= 1, got {most}")
        return max(1, -(-len(self.events) // most))

    def columns(self, most: int = 1000) -> tuple[list[Column], Peak]:
        """The live bytes by kind at no more than ``most`` moments, and the peak.

        The events are cut into ``most`` runs of equal length, and each run is shown by its event with the most live
        bytes, so the peak is one of the columns exactly (not averaged away).

        Raises:
            ValueError: ``most`` < 1, or a timeline without an event outside the build.
        """
        live = dict.fromkeys(KINDS, 0)
        stride = self.stride(most)
        columns: list[Column] = []
        best: Column | None = None
        peak: Peak | None = None
        for position, code in enumerate(self.events):
            index = abs(code) - 1
            live[self.kinds[index]] += self.sizes[index] if code > 0 else -self.sizes[index]
            total = sum(live.values())
            phase = self.phases[position]
            if best is None or total > best.total:
                best = Column(position, phase, dict(live))
            if phase != BUILD and code > 0 and (peak is None or total > peak.total):
                peak = Peak(position, phase, dict(live), op=self.ops[index])
            if (position + 1) % stride == 0 or position + 1 == len(self.events):
                columns.append(best)
                best = None
        if peak is None:
            raise ValueError("the timeline has no event outside the build")
        return columns, peak
