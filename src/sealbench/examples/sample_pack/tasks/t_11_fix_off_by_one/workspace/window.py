"""Sliding windows over lists."""


def last_n(items: list[int], n: int) -> list[int]:
    if n <= 0:
        return []
    return items[len(items) - n + 1 :] if n <= len(items) else items[1:]
