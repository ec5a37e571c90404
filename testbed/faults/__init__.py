"""Fault scenarios measured from outside the product: the fault bed, observers, a silent proxy, the verdict."""
