"""Issue 45: the wizard's pickers. The GPU search took its text for the GPU ('h100' was then an unknown GPU on a later
tab); the chosen radio button showed by colour only; model completion matched only the start of a name."""

from __future__ import annotations


import pytest

pytest.importorskip("textual")

from wizard_kit import CPU_HW, SIZE, anyio_backend, wait_for  # noqa: E402,F401
from tui.app import AdvisorApp  # noqa: E402
from tui.steps import HardwareStep  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def _chosen_line(app) -> str:
    return str(app.query_one("#gpu-chosen").render())


async def test_the_gpu_search_text_chooses_its_first_match_not_itself() -> None:
    app = AdvisorApp(model=None, hardware=CPU_HW)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.click("#gpu-search")
        await pilot.press(*"h100")
        step = app.query_one(HardwareStep)
        assert step.gpu_choice() == ("h100-sxm:1", 1) and "h100-sxm" in _chosen_line(app)
        app.query_one("#gpu-list").highlighted = 1  # another row: it is the choice
        await pilot.pause()
        assert step.gpu_choice() == ("h100-pcie:1", 1) and "h100-pcie" in _chosen_line(app)
        app.query_one("#gpu-list").highlighted = 0
        app.query_one("#model-input").value = "gpt2"
        app.action_recommend()
        await wait_for(pilot, lambda: app.recommendation is not None)
        assert app.recommendation.hardware.gpu.catalog_id == "h100-sxm"
        app.query_one("#gpu-search").value = "zzz"  # nothing matches: said at once, and the planner's line names why
        await pilot.pause()
        assert "no catalog GPU matches 'zzz'" in _chosen_line(app) and step.gpu_choice() == ("zzz:1", 1)


async def test_an_exact_gpu_id_is_chosen_over_longer_ids_that_contain_it() -> None:
    app = AdvisorApp(model=None, gpu="a100-80gb:8", hardware=CPU_HW)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.query_one("#gpu-search").value = "a100-80gb"  # a100-80gb-pcie contains it too
        await pilot.pause()
        assert app.query_one(HardwareStep).gpu_choice() == ("a100-80gb:8", 1)


async def test_the_chosen_radio_button_is_marked_not_only_coloured() -> None:
    app = AdvisorApp(model=None, hardware=CPU_HW)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        local, catalog = app.query_one("#hw-local"), app.query_one("#hw-catalog")
        assert (local.BUTTON_INNER, catalog.BUTTON_INNER) == ("●", "○")
        catalog.value = True
        await pilot.pause()
        assert (local.BUTTON_INNER, catalog.BUTTON_INNER) == ("○", "●")
        assert "●" in str(catalog.render()) and "○" in str(local.render())


async def test_model_matches_list_ids_holding_the_text_and_a_pick_resolves_it() -> None:
    app = AdvisorApp(model=None, hardware=CPU_HW)
    async with app.run_test(size=SIZE) as pilot:
        app.step = "model"
        await pilot.pause()
        matches = app.query_one("#model-matches")
        assert not matches.display  # nothing typed: no list
        await pilot.click("#model-input")
        await pilot.press(*"llama-2-7")
        ids = [matches.get_option_at_index(i).id for i in range(matches.option_count)]
        assert matches.display and "meta-llama/Llama-2-7b-hf" in ids  # found in the middle of the id
        await pilot.press("down")
        assert app.focused is matches
        matches.highlighted = ids.index("meta-llama/Llama-2-7b-hf")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.profile is not None)
        assert app.profile.id == "meta-llama/Llama-2-7b-hf"
        assert app.query_one("#model-input").value == "meta-llama/Llama-2-7b-hf"


#: Each step's focus stops, in reading order (top to bottom, left to right), ending with the button that goes on.
READING_ORDER = {
    "hardware": ["hw-source", "gpu-search", "gpu-list", "gpu-count", "nodes", "compare", "hardware-next"],
    "model": ["model-input", "model-next"],  # the list of matches takes focus only while it shows (↓ from the field)
    "workload": [
        "seq-len",
        "global-batch",
        "task",
        "method",
        "objective",
        "stack-attention",
        "stack-loss-kernel",
        "stack-torch-compile",
        "stack-packing",
        "stack-fp8",
        "recommend",
    ],
}


@pytest.mark.parametrize("step", list(READING_ORDER))
async def test_tab_goes_through_a_step_in_reading_order_then_on(step: str) -> None:
    """Issue 45: entering a step focuses its first input; Tab visits every input once, top to bottom and left to
    right as they are laid out, and then the button that goes to the next step, with no invisible stop (the step's
    scrolling container) on the way."""
    app = AdvisorApp(model=None, hardware=CPU_HW)
    async with app.run_test(size=(120, 80)) as pilot:
        app.query_one("TabbedContent").active = step
        await pilot.pause()
        await pilot.pause()
        visited = [app.focused.id]
        for _ in READING_ORDER[step][1:]:
            await pilot.press("tab")
            visited.append(app.focused.id)
        assert visited == READING_ORDER[step]
        regions = [app.query_one(f"#{name}").region for name in visited]
        assert regions == sorted(regions, key=lambda r: (r.y, r.x))  # the order they are read on the screen
        pane = app.query_one(f"#{step}")
        assert [w.id for w in app.screen.focus_chain if pane in w.ancestors] == READING_ORDER[step]


async def test_the_stack_settings_are_the_cli_s_options() -> None:
    """Issue 45: the workload step offers every stack setting recommend takes, labelled with its flag, with the CLI's
    choices (a Literal's values; an optional bool on / off) after auto, and plans with the one chosen."""
    from advisor.app.options import StackOptions
    from advisor.core.dimensions import STACK_SETTINGS
    from advisor.core.kernels import Attention
    from advisor.core.vocabulary import values
    from textual.widgets import Label, Select
    from tui.steps import WorkloadStep

    app = AdvisorApp(model=None, hardware=CPU_HW)
    async with app.run_test(size=(120, 80)) as pilot:
        app.query_one("TabbedContent").active = "workload"
        await pilot.pause()
        assert set(StackOptions.model_fields) == set(STACK_SETTINGS)
        for name in STACK_SETTINGS:
            select = app.query_one(f"#stack-{name.replace('_', '-')}", Select)
            label = select.parent.query_one(Label)
            assert str(label.render()) == "--" + name.replace("_", "-")
            assert select.value == "auto" and select.tooltip == StackOptions.model_fields[name].description
        attention = [value for _, value in app.query_one("#stack-attention", Select)._options]
        assert attention == ["auto", *values(Attention)]
        packing = app.query_one("#stack-packing", Select)
        assert [label for label, _ in packing._options] == ["auto", "on (--packing)", "off (--no-packing)"]
        packing.value = False
        await pilot.pause()
        assert app.query_one(WorkloadStep).stack_choice() == {"packing": False}
