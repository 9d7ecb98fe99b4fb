"""Helpers for splitting a list of items into pages."""


def page_count(total_items, page_size):
    """Return how many pages are needed to show total_items items."""
    return (total_items + page_size - 1) // page_size


def get_page(items, page, page_size):
    """Return the items on a 1-based page number."""
    start = page * page_size
    end = start + page_size
    return items[start:end]
