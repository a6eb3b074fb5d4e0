"""The bottom level: paths, settings, text normalisation, log masking, crash points, prompts."""
