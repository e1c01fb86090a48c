"""Alembic environment: runs on the connection Database.migrate hands over."""

from alembic import context

from sanbox.store.models import Base

connection = context.config.attributes.get("connection")
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
