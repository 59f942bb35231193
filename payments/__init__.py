"""Payments: the adapter over the official ``stripe`` SDK and a local Stripe-compatible sandbox.

Nothing here imports Django models: ``payments.sandbox`` runs as its own process
with its own storage, and ``payments.provider`` is a thin adapter the ledger calls.
"""
