import Foundation

/// Work cut into slices that run on the cores concurrently: rows of a frame, tiles, columns.
public enum Slices {
    /// How many slices a pass over `work` pixels is cut into: one for small frames (a 256² frame takes
    /// microseconds), four per core (up to four cores) for large ones. More slices than cores, taken
    /// as threads come free: in a pipeline the decoder often holds a core, and an even split would
    /// wait for the slice that lost it.
    public static func count(work: Int) -> Int {
        let cores = min(max(ProcessInfo.processInfo.activeProcessorCount, 1), 4)
        return work >= 500_000 && cores > 1 ? 4 * cores : 1
    }

    /// Runs `body` over `slices` contiguous slices of 0..<count (with the slice's index, for its
    /// scratch), concurrently when there are several; never with an empty slice.
    public static func forEach(of count: Int, slices: Int, _ body: (Range<Int>, Int) -> Void) {
        guard slices > 1, count > 1 else {
            if count > 0 { body(0..<count, 0) }
            return
        }
        let step = (count + slices - 1) / slices
        DispatchQueue.concurrentPerform(iterations: slices) { slice in
            let rows = min(slice * step, count)..<min((slice + 1) * step, count)
            if !rows.isEmpty { body(rows, slice) }
        }
    }
}
