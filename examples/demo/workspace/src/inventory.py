"""Keeps track of items in stock."""

STOCK = {"apples": 12, "pears": 0, "plums": 7}


def in_stock(item):
    # TODO: treat unknown items as an error instead of "not in stock"
    return STOCK.get(item, 0) > 0


def restock(item, count):
    # TODO: reject negative counts
    STOCK[item] = STOCK.get(item, 0) + count
