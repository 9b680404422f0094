"""Retrieval: the arms, their candidates judged, ranked and selected (`search`), and the one call per
turn that budgets, renders and traces them (`turn`)."""
