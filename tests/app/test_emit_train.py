"""The emitted train.py (issues 45 and 46): it trains a tiny model end to end with the files beside it, through
launch.sh, with advisor's callback attached (one record in the local store); no input becomes code."""

from __future__ import annotations

import json
import os
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

from cli_runner import ENV, advisor

TEXT = ["the quick brown fox jumps over the lazy dog %d" % i for i in range(200)]


def _tiny_model(folder: Path) -> None:
    """A 2-layer GPT-2 with random weights and a word-level tokenizer of its own (no Hub)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(TEXT, trainers.WordLevelTrainer(special_tokens=["[UNK]", "[PAD]", "[EOS]"]))
    PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]"
    ).save_pretrained(folder)
    config = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=256, n_positions=128, bos_token_id=2, eos_token_id=2)
    GPT2LMHeadModel(config).save_pretrained(folder)


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_emitted_train_py_trains_through_launch_sh(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    _tiny_model(tmp_path / "tiny")
    (tmp_path / "data.txt").write_text("\n".join(TEXT))
    home = tmp_path / "home"
    env = {**ENV, "ADVISOR_HOME": str(home), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{ENV.get('PATH', '')}"}
    res = advisor(
        "recommend",
        "--model",
        str(tmp_path / "tiny"),
        "--seq-len",
        "32",
        "--global-batch-size",
        "4",
        "--emit",
        "hf",
        "--emit",
        "torchrun",
        "--out",
        str(tmp_path / "cfg"),
        env=env,
    )
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "cfg" / "train.py").is_file() and (tmp_path / "cfg" / "plan.json").is_file()
    run = subprocess.run(
        [str(tmp_path / "cfg" / "launch.sh"), "--data", "data.txt", "--max-steps", "3"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "output" / "checkpoint-3").is_dir()  # output_dir relative to where the run started
    records = [json.loads(line) for line in (home / "runs.jsonl").read_text().splitlines()]
    assert [r["source"] for r in records] == ["callback"]
    assert "predicted vs measured" in run.stderr


@pytest.mark.slow
@pytest.mark.subprocess
def test_data_that_tokenizes_to_nothing_is_one_clear_line(tmp_path: Path) -> None:
    """Rows that tokenize to nothing (blank lines; a model folder without a tokenizer) stop train.py with one line
    before training, not inside the model's forward pass."""
    pytest.importorskip("transformers")
    _tiny_model(tmp_path / "tiny")
    (tmp_path / "blank.txt").write_text("\n\n   \n")
    res = advisor(
        "recommend",
        "--model",
        str(tmp_path / "tiny"),
        "--seq-len",
        "32",
        "--global-batch-size",
        "4",
        "--emit",
        "hf",
        "--out",
        str(tmp_path / "cfg"),
    )
    assert res.returncode == 0, res.stderr
    run = subprocess.run(
        [sys.executable, str(tmp_path / "cfg" / "train.py"), "--data", "blank.txt", "--max-steps", "1"],
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 1 and "tokenized to nothing" in run.stderr.strip().splitlines()[-1], run.stderr[-2000:]


def test_no_input_becomes_code(tmp_path: Path) -> None:
    """A model id with quotes, newlines and code in it is a string literal of the script, which compiles."""
    from advisor.app.api import recommend
    from advisor.app.emit_train import train_script

    rec = recommend("gpt2", gpu="a100-80gb")
    hostile = 'x"""\nimport os; os.system("touch PWNED")\n#\''
    rec = rec.model_copy(update={"model": rec.model.model_copy(update={"id": hostile})})
    script = tmp_path / "train.py"
    script.write_text(train_script(rec))
    py_compile.compile(str(script), doraise=True)
    assert "\nimport os; os.system" not in script.read_text()
    namespace: dict = {"__file__": str(script)}
    exec(compile(script.read_text().split("def load_rows")[0], str(script), "exec"), namespace)  # the constants only
    assert namespace["MODEL"] == hostile and not (tmp_path / "PWNED").exists()
