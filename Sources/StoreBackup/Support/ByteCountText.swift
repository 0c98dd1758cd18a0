import Foundation

/// Sizes as the library's messages and the command line print them.
package enum ByteCountText {
    /// Binary units with one decimal: `512 B`, `12.3 MiB`, `1.2 GiB`.
    package static func describe(_ bytes: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(bytes)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 { value /= 1024; unit += 1 }
        return unit == 0 ? "\(bytes) B" : String(format: "%.1f %@", value, units[unit])
    }
}
