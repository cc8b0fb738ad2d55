"""Code shared by both runners: HTTP front, OpenAI protocol, metrics, scheduling, prefix cache."""
