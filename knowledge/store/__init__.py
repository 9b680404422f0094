"""All SQL, in named statements, and the database bridge (`knowledge.store.db`, the only module that
imports asyncpg). The store imports only the core and the data model; the shells call its
statements."""
