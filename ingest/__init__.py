"""Loading the dataset into the SQL database, the property graph and Chroma."""
