"""Invoice arithmetic: the example project `make demo` hands to an agent.

It has a bug that its tests catch: the agent's task is to find and fix it.
"""


def subtotal(items):
    """Sum of quantity * unit price over (name, quantity, unit_price) items."""
    return sum(qty * price for _, qty, price in items)


def apply_discount(amount, percent):
    """Return amount reduced by percent (0..100)."""
    if not 0 <= percent <= 100:
        raise ValueError(f"discount {percent}% is outside 0..100")
    return amount * percent / 100


def total(items, discount_percent=0, tax_percent=0):
    """Subtotal, less the discount, plus tax on the discounted amount."""
    discounted = apply_discount(subtotal(items), discount_percent)
    return round(discounted * (100 + tax_percent) / 100, 2)
