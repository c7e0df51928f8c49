"""The volume manager (issue 13): a pod's volumes set up before its containers start, torn down
after they stop; see ``manager.py``. ``content/`` writes the files of API-sourced volumes."""
