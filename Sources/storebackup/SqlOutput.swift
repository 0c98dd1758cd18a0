import Foundation
import StoreBackup

/// How `storebackup sql` prints its results: tables, CSV or JSON.
struct SqlOutput {
    enum Format: Sendable { case table, csv, json }

    let format: Format
    private var text = ""
    private var statements: [Any] = []
    private var columns: [String] = []
    private var rows: [[String]] = []
    private var jsonRows: [[Any]] = []
    private var statement = ""
    private var started = false
    /// A table is laid out once all its rows are in: beyond this many, use --csv.
    static let maxTableRows = 100_000

    init(format: Format) { self.format = format }

    mutating func begin(statement: String, columns: [String]) {
        flush()
        self.statement = statement
        self.columns = columns
        started = true
    }

    mutating func add(_ values: [SQLValue]) throws {
        switch format {
        case .json:
            jsonRows.append(values.map(Self.jsonValue))
        case .csv, .table:
            if format == .table && rows.count >= Self.maxTableRows {
                throw ValidationErrorText("more than \(Self.maxTableRows) rows for a table: print them with --csv or --json")
            }
            rows.append(values.map { Self.text($0) })
        }
    }

    mutating func finish() -> String {
        flush()
        if format == .json {
            let data = (try? JSONSerialization.data(withJSONObject: statements, options: [.prettyPrinted, .sortedKeys])) ?? Data()
            return String(decoding: data, as: UTF8.self)
        }
        return text.hasSuffix("\n") ? String(text.dropLast()) : text
    }

    private mutating func flush() {
        guard started else { return }
        started = false
        switch format {
        case .json:
            statements.append(["statement": statement, "columns": columns, "rows": jsonRows] as [String: Any])
            jsonRows = []
        case .csv:
            guard !columns.isEmpty else { break }
            if !text.isEmpty { text += "\n" }
            for line in [columns] + rows { text += line.map(Self.csvField).joined(separator: ",") + "\n" }
        case .table:
            guard !columns.isEmpty else { break }
            if !text.isEmpty { text += "\n" }
            text += Self.table(columns: columns, rows: rows)
        }
        rows = []
    }

    private static func table(columns: [String], rows: [[String]]) -> String {
        let cells = ([columns] + rows).map { $0.map(visible) }
        var widths = columns.map { _ in 0 }
        for line in cells { for (index, cell) in line.enumerated() { widths[index] = max(widths[index], cell.count) } }
        func render(_ line: [String]) -> String {
            line.enumerated().map { $1.padding(toLength: widths[$0], withPad: " ", startingAt: 0) }.joined(separator: " | ")
                .replacingOccurrences(of: "\\s+$", with: "", options: .regularExpression)
        }
        var out = render(cells[0]) + "\n" + widths.map { String(repeating: "-", count: $0) }.joined(separator: "-+-") + "\n"
        for line in cells.dropFirst() { out += render(line) + "\n" }
        out += "(\(rows.count) row\(rows.count == 1 ? "" : "s"))\n"
        return out
    }

    /// Control characters shown as `\n`, `\t` or `\u{…}`, so a value cannot act on the terminal or break the table.
    private static func visible(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            case "\r": out += "\\r"
            default:
                if scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) {
                    out += "\\u{\(String(scalar.value, radix: 16))}"
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out
    }

    private static func csvField(_ text: String) -> String {
        guard text.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return text }
        return "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    static func text(_ value: SQLValue) -> String {
        switch value {
        case .null: ""
        case .integer(let number): String(number)
        case .real(let number): String(number)
        case .text(let text): text
        case .blob(let bytes): "X'" + hex(bytes) + "'"
        }
    }

    private static func jsonValue(_ value: SQLValue) -> Any {
        switch value {
        case .null: NSNull()
        case .integer(let number): number
        case .real(let number): number
        case .text(let text): text
        case .blob(let bytes): hex(bytes)
        }
    }

    private static func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02X", $0) }.joined() }
}

/// A failure of the output itself, said as it is.
struct ValidationErrorText: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
