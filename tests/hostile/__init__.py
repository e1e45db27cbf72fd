"""Hostile samples run through the real sandbox (see ``cases.py``)."""
