"""Background services: observer, collector, watcher, advisor, controller, watchdog."""
