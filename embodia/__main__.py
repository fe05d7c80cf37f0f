"""`python -m embodia ...` is the `embodia` command."""
from embodia.agent.cli import main

if __name__ == "__main__":
    main()
