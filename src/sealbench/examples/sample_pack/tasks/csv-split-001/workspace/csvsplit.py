"""Split one CSV line into its fields."""


def split_line(line: str) -> list[str]:
    return line.split(",")
