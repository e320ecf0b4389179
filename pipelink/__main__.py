"""`pipelink` (the console script) and `python -m pipelink`.

The CLI's modules import here, inside the same guard the commands run under: a Ctrl-C while they load ends
quietly with 130, as one during a command does, not with a traceback from the middle of an import."""
import sys


def main() -> int:
    try:
        from .cli import main as run_command
    except KeyboardInterrupt:
        return 130
    return run_command()


if __name__ == "__main__":
    sys.exit(main())
