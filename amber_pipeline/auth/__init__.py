"""Who is asking the hosted API: users, their roles (staff, operator) and their personal API tokens."""
