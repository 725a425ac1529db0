"""The persistent store: SQLModel tables, Alembic migrations, engines and transactions."""
