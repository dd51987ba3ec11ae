"""Scripts that regenerate the paper's figures and tables (`python -m analysis.<name>`). The package holds only
programs, so importing it prepares the process as each program would: OpenMP workers that sleep
(`polestar/threads.py`), before any script imports torch."""

from polestar.threads import quiet_openmp

quiet_openmp()
