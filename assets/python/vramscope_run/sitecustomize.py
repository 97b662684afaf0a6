"""vramscope run's start-up hook (Python imports ``sitecustomize`` from PYTHONPATH at start-up).

1. Installs a finder that waits for ``import torch`` (``vramscope_run_hook.install``); nothing
   else happens in processes that never import torch.
2. Executes the next ``sitecustomize`` on ``sys.path`` (a distribution's, a virtualenv's, a
   tool's), which ours shadows, so that the user's setup keeps working -- also when step 1 fails.

Our own errors are printed as one ``vramscope:`` line and never stop the program; errors in the
chained sitecustomize propagate to ``site`` unchanged, which reports them as it always would.
"""


def _install_hook():
    try:
        import vramscope_run_hook

        vramscope_run_hook.install()
    except Exception as error:  # noqa: BLE001 - a broken hook must not break the program
        try:
            import sys

            text = " ".join(("%s: %s" % (type(error).__name__, error)).split())
            sys.stderr.write("vramscope: the run hook failed to load (%s); not recording\n" % text)
            sys.stderr.flush()
        except Exception:  # noqa: BLE001
            pass


def _chain_next_sitecustomize():
    """Executes the first ``sitecustomize`` on ``sys.path`` that is not this file, as
    ``sitecustomize``: it ends up as ``sys.modules["sitecustomize"]``, as if Python had found it
    itself (site.py takes whatever that entry holds once our import finishes).

    Each file runs at most once per process (the set lives on ``sys``, which outlives this
    module): some sitecustomize files chain further by deleting ``sys.modules["sitecustomize"]``
    and importing it again, which finds us again; we then skip what already ran and go on.
    """
    import os
    import sys

    # The import system's own modules, loaded in every interpreter: importing the importlib
    # package instead would load more modules (warnings, on Python < 3.11) into processes that
    # we promise to leave alone.
    try:
        path_finder = sys.modules["_frozen_importlib_external"].PathFinder
        module_from_spec = sys.modules["_frozen_importlib"].module_from_spec
    except (KeyError, AttributeError):
        import importlib.machinery
        import importlib.util

        path_finder = importlib.machinery.PathFinder
        module_from_spec = importlib.util.module_from_spec

    ours = os.path.realpath(__file__)
    our_dir = os.path.dirname(ours)
    done = sys.__dict__.setdefault("_vramscope_chained_sitecustomize", set())
    for entry in list(sys.path):
        try:
            if os.path.realpath(entry or os.curdir) == our_dir:
                continue
            spec = path_finder.find_spec("sitecustomize", [entry])
        except Exception:  # noqa: BLE001 - an odd sys.path entry holds no sitecustomize
            continue
        if spec is None or spec.loader is None:  # none there, or a bare namespace folder
            continue
        origin = os.path.realpath(spec.origin) if spec.origin else repr(entry)
        if origin == ours or origin in done:
            continue
        done.add(origin)
        module = module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)  # its errors are its own: site reports them
        return


_install_hook()
_chain_next_sitecustomize()
