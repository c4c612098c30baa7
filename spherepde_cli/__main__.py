"""``python -m spherepde_cli``: the console command, as the installed ``spherepde`` runs it."""
import sys

from . import main

sys.exit(main())
