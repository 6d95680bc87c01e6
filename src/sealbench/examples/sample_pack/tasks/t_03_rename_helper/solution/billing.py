"""Invoice arithmetic."""


def compute_total(prices: list[float], tax_rate: float) -> float:
    subtotal = sum(prices)
    return round(subtotal * (1 + tax_rate), 2)


def invoice_line(prices: list[float], tax_rate: float) -> str:
    return f"TOTAL {compute_total(prices, tax_rate):.2f}"
