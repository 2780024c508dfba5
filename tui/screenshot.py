"""Save an SVG screenshot of the wizard (Textual's own ``save_screenshot``) for the README.

Usage: python -m tui.screenshot [OUT.svg] [--model gpt2] [--gpu a100-80gb]
The machine shown on the hardware step is a fixed CPU-only one, so the picture does not depend on
where it is taken; the recommendation is for the catalog GPU.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from probes.hardware import HardwareProfile, HostInfo
from tui.app import AdvisorApp

SIZE = (100, 34)


async def _shoot(out: Path, model: str, gpu: str) -> None:
    hw = HardwareProfile(source="none", host=HostInfo(cpu_cores=2, ram_bytes=24 * 2**30, cpu_flags=["avx2"]))
    app = AdvisorApp(model=model, gpu=gpu, hardware=hw)
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(600):
            if app.recommendation is not None:
                break
            await pilot.pause(0.05)
        await pilot.press("down", "down")  # explain the optimizer
        await pilot.pause(0.2)
        app.save_screenshot(filename=out.name, path=str(out.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default="docs/tui-recommendation.svg")
    parser.add_argument("--model", default="gpt2")
    parser.add_argument("--gpu", default="a100-80gb")
    args = parser.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    asyncio.run(_shoot(out, args.model, args.gpu))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
