"""``make drill``: a crash drill against a fresh stack, checking the product's promises at the end."""
