import ArgumentParser
import Foundation
import Metrics
import Prometheus
import StoreBackup
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// `--metrics-file FILE`, shared by the commands that back up, restore or prune.
struct MetricsFileOption: ParsableArguments {
    @Option(
        name: .customLong("metrics-file"),
        help: ArgumentHelp(
            "Write Prometheus metrics (text format) to this file when the command ends, for node_exporter's textfile collector; default: metrics.file in the configuration.",
            valueName: "file"))
    var path: String?

    /// Starts collecting when a file is named here or in `configured`.
    func start(configured: String? = nil) {
        guard let file = path ?? configured else { return }
        MetricsFile.start(path: FileManager.default.currentDirectoryPath.appendingPathIfRelative(file))
    }
}

/// The library reports through swift-metrics; the command line collects those metrics in a
/// Prometheus registry and writes them as a text file when it exits, atomically (a temporary
/// file beside it, fsynced, renamed), the usual way to watch batch jobs with node_exporter.
///
/// Each run is a new process, so the previous file's values are read back first: counters
/// keep counting across runs, and a failed run does not erase the last success time.
enum MetricsFile {
    /// The one registry and target of this process, set once by ``start(path:)``.
    private static let target = LockedTarget()

    static func start(path: String) {
        guard target.set(path: path, registry: PrometheusCollectorRegistry()) else { return }
        let registry = target.registry!
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        // Read back only a file of the size this command writes (a few KiB per store).
        let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.intValue ?? 0
        if size <= 1 << 20, let previous = try? String(contentsOfFile: path, encoding: .utf8) {
            // The file may have been edited or damaged: only finite values are carried over, and
            // a counter only when it is a whole number that fits (converting others would trap).
            for sample in PrometheusText.samples(in: previous)
            where sample.name.hasPrefix("storebackup_") && sample.value.isFinite {
                if sample.isCounter {
                    guard sample.value >= 0, sample.value < 9e18 else { continue }
                    Counter(label: sample.name, dimensions: sample.labels).increment(by: Int(sample.value))
                } else {
                    Gauge(label: sample.name, dimensions: sample.labels).record(sample.value)
                }
            }
        }
        // Terminal.fail and normal returns both end in exit(); write the file then.
        atexit { MetricsFile.write() }
    }

    /// Writes the registry's text to the file; a failure is reported on stderr, never fatal.
    static func write() {
        guard let path = target.path, let registry = target.registry else { return }
        let text = registry.emitToString()
        do {
            try DurableFile.write(Data(text.utf8), to: path, mode: 0o644)
        } catch {
            FileHandle.standardError.write(Data("storebackup: warning: cannot write the metrics file \(path): \(error)\n".utf8))
        }
    }
}

/// The exporter's state: written once at start, read at exit, possibly from another thread.
private final class LockedTarget: Sendable {
    private let stored = Mutex<(path: String, registry: PrometheusCollectorRegistry)?>(nil)

    /// False when already set (the metrics system can be bootstrapped only once).
    func set(path: String, registry: PrometheusCollectorRegistry) -> Bool {
        stored.withLock { stored in
            guard stored == nil else { return false }
            stored = (path, registry)
            return true
        }
    }
    var path: String? { stored.withLock { $0?.path } }
    var registry: PrometheusCollectorRegistry? { stored.withLock { $0?.registry } }
}

/// Reads samples back from Prometheus's text exposition format (what the registry wrote).
enum PrometheusText {
    struct Sample {
        var name: String
        var labels: [(String, String)]
        var value: Double
        var isCounter: Bool
    }

    static func samples(in text: String) -> [Sample] {
        var counters = Set<String>()
        var samples: [Sample] = []
        for line in text.split(separator: "\n") {
            if line.hasPrefix("# TYPE ") {
                let parts = line.split(separator: " ")
                if parts.count == 4, parts[3] == "counter" { counters.insert(String(parts[2])) }
                continue
            }
            guard !line.hasPrefix("#"), let sample = parse(Substring(line)) else { continue }
            samples.append(
                Sample(
                    name: sample.name, labels: sample.labels, value: sample.value,
                    isCounter: counters.contains(sample.name)))
        }
        return samples
    }

    /// `name{a="x",b="y\"z"} 12.5`, or `name 12.5`.
    private static func parse(_ line: Substring) -> (name: String, labels: [(String, String)], value: Double)? {
        var labels: [(String, String)] = []
        var rest = line[...]
        guard let nameEnd = rest.firstIndex(where: { $0 == "{" || $0 == " " }) else { return nil }
        let name = String(rest[..<nameEnd])
        rest = rest[nameEnd...]
        if rest.first == "{" {
            rest = rest.dropFirst()
            while rest.first != "}" {
                guard let equals = rest.firstIndex(of: "="), rest[rest.index(after: equals)...].first == "\"" else { return nil }
                let key = String(rest[..<equals])
                rest = rest[rest.index(equals, offsetBy: 2)...]
                var value = ""
                while let character = rest.first, character != "\"" {
                    rest = rest.dropFirst()
                    if character == "\\", let escaped = rest.first {
                        rest = rest.dropFirst()
                        value.append(escaped == "n" ? "\n" : escaped)
                    } else {
                        value.append(character)
                    }
                }
                guard rest.first == "\"" else { return nil }
                rest = rest.dropFirst()
                labels.append((key, value))
                if rest.first == "," { rest = rest.dropFirst() }
                guard !rest.isEmpty else { return nil }
            }
            rest = rest.dropFirst()
        }
        guard let value = Double(rest.trimmingCharacters(in: .whitespaces)) else { return nil }
        return (name, labels, value)
    }
}

extension String {
    /// `file` made absolute against this directory when it is relative.
    func appendingPathIfRelative(_ file: String) -> String {
        file.hasPrefix("/") ? file : self + "/" + file
    }
}
