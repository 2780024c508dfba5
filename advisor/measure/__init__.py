"""On-device measurement: the simulator (a training step on fake tensors), the trial builder, the
validator's trial steps and their distributed worker. Imports torch lazily, inside functions.

Modules: ``trainable`` (model, optimizer and batch of a plan), ``simulate`` (fake-tensor steps),
``outcome`` (the typed trial spec, outcomes and progress events), ``trial_memory`` (a trial's
peaks and limit), ``trial`` (one trial, on one device or through torchrun), ``dist_worker`` (one
rank), ``report_models`` (the validation report's JSON models), ``session`` (a validation's trials
and corrections) and ``validation`` (``validate()``).

Imports the engine (for predictions), ``rules`` and ``probes``; never ``advisor.app`` or ``tui``.
"""
