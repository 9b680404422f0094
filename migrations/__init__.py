"""``knowledge.migrations`` (this folder, mapped under the package): the numbered SQL files, applied in
order by `knowledge.store.migrate`, never edited once applied."""
