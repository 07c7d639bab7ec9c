"""How results.md writes a figure and a table."""

from __future__ import annotations


def f(value, digits: int = 0, suffix: str = "") -> str:
    if value is None:
        return "–"
    if isinstance(value, (int, float)):
        return f"{value:,.{digits}f}{suffix}"
    return str(value)


def table(header: list[str], rows: list[list[str]], align: list[str] | None = None) -> list[str]:
    align = align or ["l"] + ["r"] * (len(header) - 1)
    sep = ["---:" if a == "r" else "---" for a in align]
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(sep) + "|",
        *["| " + " | ".join(r) + " |" for r in rows],
        "",
    ]
