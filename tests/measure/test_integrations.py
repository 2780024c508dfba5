"""advisor.integrations on the CPU: a tiny GPT-2 trained through the real transformers Trainer with the callback and
through a plain loop with ``track``: the record written, the comparison line, the memory warning of a plan whose
predicted memory is too low, and training unchanged by the callback (the same losses, seeded)."""

from __future__ import annotations

import json
import logging

import pytest

pytestmark = pytest.mark.slow  # the torch / transformers stack (tests/conftest.py)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from advisor.app import api  # noqa: E402
from advisor.measure import run_store  # noqa: E402
from probes.hardware import HardwareProfile, read_host  # noqa: E402

TINY = {
    "model_type": "gpt2",
    "architectures": ["GPT2LMHeadModel"],
    "n_layer": 2,
    "n_embd": 64,
    "n_head": 2,
    "n_positions": 64,
    "vocab_size": 256,
}
SEQ, BATCH, STEPS = 32, 4, 6


@pytest.fixture
def plan_file(tmp_path):
    """``advisor estimate --json``'s object for the tiny model on this CPU, as a file."""
    config = tmp_path / "model" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(TINY))
    est = api.estimate(
        str(config.parent),
        hardware=HardwareProfile(source="none", host=read_host()),
        seq_len=SEQ,
        micro_batch_size=BATCH,
        precision="fp32",
        optimizer="adamw",
    )
    path = tmp_path / "plan.json"
    path.write_text(est.model_dump_json(indent=2))
    return path


def _low_memory(plan_file, tmp_path):
    data = json.loads(plan_file.read_text())
    data["memory"]["peak_bytes"] = 1  # edited far too low
    low = tmp_path / "low.json"
    low.write_text(json.dumps(data))
    return low


def _model():
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(
        transformers.GPT2Config(**{k: v for k, v in TINY.items() if k not in ("model_type", "architectures")})
    )


class _Rows(torch.utils.data.Dataset):
    def __init__(self) -> None:
        g = torch.Generator().manual_seed(1)
        self.ids = torch.randint(0, TINY["vocab_size"], (BATCH * STEPS, SEQ), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _train(tmp_path, callbacks) -> list[float]:
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=BATCH,
        max_steps=STEPS,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        seed=0,
        save_strategy="no",
        disable_tqdm=True,
        learning_rate=1e-3,
        dataloader_num_workers=0,
    )
    trainer = transformers.Trainer(model=_model(), args=args, train_dataset=_Rows(), callbacks=callbacks)
    trainer.train()
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def test_the_trainer_callback_records_compares_and_leaves_training_unchanged(plan_file, tmp_path, caplog) -> None:
    from advisor.integrations import AdvisorCallback

    without = _train(tmp_path, [])
    callback = AdvisorCallback(str(plan_file), warmup_steps=2, measure_steps=3)
    with caplog.at_level(logging.INFO, logger="advisor.integrations"):
        with_it = _train(tmp_path, [callback])
    assert len(with_it) == STEPS and with_it == without  # the callback never changes training
    summary = callback.tracker.summary
    assert summary.startswith("advisor: predicted vs measured over 3 steps after 2 warm-up:")
    assert "step " in summary and "tokens/s" in summary and "peak memory" in summary
    assert summary in caplog.text
    (record,) = run_store.read().records
    assert record["source"] == run_store.SOURCE_CALLBACK and record["device"]["type"] == "cpu"
    assert record["measured"]["steps"] == 3 and record["measured"]["step_time_s"] > 0
    assert record["measured"]["tokens_per_s"] == pytest.approx(BATCH * SEQ / record["measured"]["step_time_s"])
    assert record["predicted"]["step_time_s"] == json.loads(plan_file.read_text())["speed"]["step_time_s"]
    assert record["plan"]["micro_batch_size"] == BATCH and record["seq_len"] == SEQ
    assert "torch" in record["libraries"]


def test_the_callback_warns_when_the_predicted_memory_is_too_low(plan_file, tmp_path, caplog) -> None:
    from advisor.integrations import AdvisorCallback

    callback = AdvisorCallback(str(_low_memory(plan_file, tmp_path)), warmup_steps=2, measure_steps=3)
    with caplog.at_level(logging.INFO, logger="advisor.integrations"):
        _train(tmp_path, [callback])
    (warning,) = [w for w in callback.tracker.warnings if w.startswith("memory above the prediction")]
    assert "advisor: warning: " + warning in caplog.text
    assert "memory above the prediction" in run_store.read().records[0]["notes"]


def _loop(plan, **options):
    from advisor import integrations

    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rows = _Rows().ids
    losses = []
    with integrations.track(plan, model=model, optimizer=optimizer, **options) as t:
        for step in range(STEPS):
            t.step_begin()
            loss = model(
                input_ids=rows[step * BATCH : (step + 1) * BATCH], labels=rows[step * BATCH : (step + 1) * BATCH]
            ).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
            t.step(tokens=BATCH * SEQ)
    return t, losses


def test_the_context_manager_in_a_plain_loop(plan_file, tmp_path) -> None:
    t, losses = _loop(str(plan_file), warmup_steps=1, measure_steps=10)  # the run ends first: reported at exit
    assert t.summary.startswith("advisor: predicted vs measured over 5 steps after 1 warm-up:")
    assert not [w for w in t.warnings if w.startswith("memory")]  # the states stay below the predicted peak
    (record,) = run_store.read().records
    assert record["measured"]["steps"] == 5 and record["measured"]["tokens_per_step"] == BATCH * SEQ
    t_low, low_losses = _loop(str(_low_memory(plan_file, tmp_path)), warmup_steps=1, measure_steps=3, store=False)
    assert any(w.startswith("memory above the prediction") for w in t_low.warnings)
    assert low_losses == losses and len(run_store.read().records) == 1  # store=False: nothing appended


def test_a_slow_run_names_the_data_loader(plan_file, tmp_path, monkeypatch) -> None:
    from advisor.integrations import tracker as tracker_module

    data = json.loads(plan_file.read_text())
    data["speed"]["step_time_s"] /= 1000  # predicted far too fast
    data["speed"]["tokens_per_s"] *= 1000
    data["speed"]["samples_per_s"] *= 1000
    t = tracker_module.Tracker(data, warmup_steps=1, measure_steps=2, store=False)
    import time

    for _ in range(3):
        time.sleep(0.02)  # waiting for a batch
        t.step_begin()
        t.step(tokens=BATCH * SEQ)
    (warning,) = t.warnings
    assert "below 0.8x" in warning and "the data loader" in warning


def test_a_bad_plan_is_one_line(tmp_path) -> None:
    from advisor.core.errors import UsageError
    from advisor.integrations import AdvisorCallback, track

    (tmp_path / "bad.json").write_text('{"plan": 1}')
    for bad in (tmp_path / "bad.json", tmp_path / "missing.json"):
        with pytest.raises(UsageError):
            AdvisorCallback(str(bad))
        with pytest.raises(UsageError):
            with track(str(bad)):
                pass
