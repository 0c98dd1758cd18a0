/// Quoting for the SQL a diff runs and writes.
enum RowDiffSQL {
    /// `name` as an SQL identifier: in double quotes, inner quotes doubled.
    static func identifier(_ name: String) -> String {
        "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    /// `text` as an SQL string literal, inner apostrophes doubled.
    static func string(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "''") + "'"
    }

    /// A value as `quote()` wrote it, made valid SQL: `quote()` writes an infinite real as
    /// `Inf`, which SQL reads as a name, so it becomes a literal that overflows to infinity
    /// (as the `sqlite3` shell's `.dump` writes it). Every other literal is exact already:
    /// `quote()` re-reads a real it wrote with 15 digits and writes 20 when they differ.
    static func literal(_ quoted: String?) -> String {
        guard let quoted else { return "NULL" }
        switch quoted {
        case "Inf": return "9e999"
        case "-Inf": return "-9e999"
        default: return quoted
        }
    }
}
