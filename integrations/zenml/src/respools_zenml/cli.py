"""``respools-zenml``: the command this package installs (``respools-zenml register-flavors``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="respools-zenml", description="respools for ZenML")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "register-flavors", help="register (or update) the respools_local and respools_kubernetes orchestrator flavors"
    )
    parser.parse_args(argv)
    from respools_zenml.flavors import register_flavors

    for flavor in register_flavors():
        print(f"registered orchestrator flavor {flavor.name!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
