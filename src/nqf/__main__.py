"""``python -m nqf``: the ``nqf`` console script (``nqf.cli:main``) for an environment whose
scripts directory is not on PATH. Same app, same exit statuses; like the script, ``--help``,
``--version`` and usage errors never load JAX (``nqf.cli`` imports the library lazily)."""

from nqf.cli import main

if __name__ == "__main__":
    main()
