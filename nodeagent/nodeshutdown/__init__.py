"""Graceful node shutdown through logind (the kubelet's ``nodeshutdown`` package).

``policy.py`` holds the pure rules (groups, budgets, strings, the drop-in and the state file
format), ``manager.py`` the manager, ``state.py`` the state file, ``cli.py`` the
``nodeagent shutdown plan`` command.
"""
