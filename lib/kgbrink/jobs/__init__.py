"""Job functions: read inputs, call the pure transformations, write Delta tables, return a JobSummary.

The CLI (kgbrink.cli) and the spark-submit entry points in ``jobs/`` both call these. Importing this
package imports each of its modules, so every job is registered (:data:`kgbrink.core.jobs.REGISTRY`) once
any job module is imported: the one door to the jobs.
"""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
