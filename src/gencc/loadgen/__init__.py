"""The load generator: open-loop Poisson load against a running server, one record per request.

arrivals (`poisson_arrivals`, shared with serving's virtual-time simulator), load (`run_http`,
`run_inprocess`, `accounting`, `summary`, `histogram_quantiles`, `write_csv`, `plot`), client (a small
keep-alive HTTP/1.1 client on asyncio protocols, `HttpClient`). `gencc loadtest` is its command.
"""

from .arrivals import poisson_arrivals
from .client import ClientError, HttpClient
from .load import accounting, histogram_quantiles, plot, run_http, run_inprocess, summary, write_csv

__all__ = ["ClientError", "HttpClient", "accounting", "histogram_quantiles", "plot", "poisson_arrivals", "run_http",
           "run_inprocess", "summary", "write_csv"]
