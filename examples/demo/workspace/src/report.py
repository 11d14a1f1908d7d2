"""Prints a stock report."""

from inventory import STOCK


def report():
    for item, count in sorted(STOCK.items()):
        print(f"{item:>8}: {count}")
