"""Serving's HTTP front door (private: `gencc.serving.create_app` and `start_in_thread` are its public face).

app (the FastAPI app: routes, metrics, lifespan), limits (API key, Content-Type, body size and read deadline,
before any parsing), schemas (the request bodies and their one parser).
"""
