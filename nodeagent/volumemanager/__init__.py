"""The volume manager: each pod's volumes set up before its containers start, torn down after
(``manager.py``); ``content/`` writes the files of API-sourced volumes."""
