"""Views, one module per area: pages (reads), actions (writes), failures, audit, ops."""
