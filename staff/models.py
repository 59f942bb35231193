"""The staff inbox has no tables of its own: it works on the ledger through ``tickets.services``.
(This module exists so that Django sends this app's ``post_migrate``, see ``staff.apps``.)"""
