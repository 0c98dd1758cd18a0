import Foundation
import StoreBackup

/// How `diff` prints a ``StoreDiff``: text for people, JSON for scripts.
enum DiffOutput {
    static func text(_ diff: StoreDiff) -> [String] {
        let newer = diff.newerIsLive ? "the live store \(diff.newer)" : "\"\(diff.newer)\""
        var lines = ["\"\(diff.older)\" -> \(newer)"]
        for database in diff.databases {
            switch database.presence {
            case .added: lines.append("\(database.path): database added")
            case .removed: lines.append("\(database.path): database removed")
            case .both:
                guard database.hasChanges else {
                    lines.append("\(database.path): no changes")
                    continue
                }
                lines.append("\(database.path):")
                for table in database.tables { lines.append("  " + summary(table)) }
                for change in database.schemaChanges {
                    lines.append("  \(change.type) \(change.name) \(change.kind.rawValue)")
                }
            }
        }
        if diff.files.isEmpty {
            lines.append("files: no changes")
        } else {
            lines.append("files:")
            for file in diff.files {
                let kind = file.kind.rawValue.padding(toLength: 8, withPad: " ", startingAt: 0)
                let size = (file.sizeAfter ?? file.sizeBefore).map { "  (\(Terminal.formatBytes($0)))" } ?? ""
                lines.append("  \(kind) \(file.path)\(file.type == "file" ? "" : " (\(file.type))")\(size)")
            }
        }
        return lines.map(LsCommand.visible)
    }

    /// `table accounts (by id): 1 inserted, 0 deleted, 2 changed`.
    static func summary(_ table: TableDiff) -> String {
        let how: String
        switch table.comparison {
        case .primaryKey, .rowid: how = " (by \(table.keyColumns.joined(separator: ", ")))"
        case .whole: how = " (compared whole)"
        case .notCompared: how = ""
        }
        var line = "table \(table.name)\(how): "
        switch table.presence {
        case .added: line += "added, \(table.inserted) rows"
        case .removed: line += "removed, had \(table.deleted) rows"
        case .both:
            line +=
                table.comparison == .notCompared
                ? "not compared" : "\(table.inserted) inserted, \(table.deleted) deleted, \(table.changed) changed"
        }
        if let note = table.note { line += " [\(note)]" }
        return line
    }

    /// One row: `deleted  [id=5]  balance=1000`, `changed  [id=7]  balance: 1000 -> 900`.
    static func describe(_ change: RowChange) -> String {
        var line = change.kind.rawValue.padding(toLength: 9, withPad: " ", startingAt: 0)
        if !change.key.isEmpty {
            line += "[" + zip(change.keyColumns, change.key).map { "\($0)=\($1)" }.joined(separator: ", ") + "]  "
        }
        switch change.kind {
        case .changed:
            let before = change.before ?? [], after = change.after ?? []
            let parts = change.columns.indices.filter { before[$0] != after[$0] }.map {
                "\(change.columns[$0]): \(short(before[$0])) -> \(short(after[$0]))"
            }
            line += parts.joined(separator: "  ")
        case .inserted, .deleted:
            let values = (change.after ?? change.before) ?? []
            line += zip(change.columns, values).map { "\($0)=\(short($1))" }.joined(separator: " ")
        }
        return line
    }

    /// A long literal cut to keep one row on one line; --json has the whole value.
    private static func short(_ literal: String) -> String {
        literal.count <= 60 ? literal : String(literal.prefix(57)) + "…"
    }

    static func json(_ diff: StoreDiff) throws -> String {
        let databases: [[String: Any]] = diff.databases.map { database in
            [
                "path": database.path, "presence": database.presence.rawValue,
                "tables": database.tables.map { table -> [String: Any] in
                    [
                        "name": table.name, "presence": table.presence.rawValue, "comparison": table.comparison.rawValue,
                        "key": table.keyColumns, "inserted": table.inserted, "deleted": table.deleted, "changed": table.changed,
                        "note": table.note ?? NSNull(),
                        "rows": table.rows.map { row -> [String: Any] in
                            [
                                "kind": row.kind.rawValue, "key": row.key, "keyColumns": row.keyColumns, "columns": row.columns,
                                "before": row.before ?? NSNull(), "after": row.after ?? NSNull(),
                            ]
                        },
                    ]
                },
                "schema": database.schemaChanges.map { change -> [String: Any] in
                    [
                        "kind": change.kind.rawValue, "type": change.type, "name": change.name, "table": change.table,
                        "before": change.before ?? NSNull(), "after": change.after ?? NSNull(),
                    ]
                },
            ]
        }
        let files: [[String: Any]] = diff.files.map { file in
            [
                "kind": file.kind.rawValue, "path": file.path, "type": file.type,
                "sizeBefore": file.sizeBefore ?? NSNull(), "sizeAfter": file.sizeAfter ?? NSNull(),
            ]
        }
        let object: [String: Any] = [
            "older": diff.older, "newer": diff.newer, "live": diff.newerIsLive, "databases": databases, "files": files,
        ]
        let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .prettyPrinted])
        return String(decoding: data, as: UTF8.self)
    }
}
