"""A local Coalesce: serves a project file (``docs/project-file.md``) through Coalesce's REST API and
Scheduler, in the shapes ``docs/coalesce-api.md`` records, and really executes refresh runs against
the local Snowflake.

Run as ``python -m dw_local.coalesce_sim --port P --project FILE --data-dir DIR --snowflake-host 127.0.0.1
--snowflake-port N --token TOKEN [--scheduler]``.

Modules: ``project`` (the file's models, checks and API shapes), ``store`` (runs in SQLite),
``runner`` (SQL rendering and execution), ``scheduler`` (run queue and cron schedules), ``faults``,
``clock``, ``schemas`` (request bodies), ``simulator`` (the service) and ``app`` (the HTTP routes).
"""
