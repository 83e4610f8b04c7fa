"""Model Garden tasks: data -> model -> loss -> metrics, one objective each."""
