import Foundation

/// Checked size arithmetic: every size that comes from a manifest, a property or the caps is computed
/// with these, so a hostile or extreme value is refused with an error instead of trapping on overflow
/// or asking the allocator for more than the machine has.

/// The product of `factors`, or nil when one is negative or the product overflows.
func checkedProduct(_ factors: [Int]) -> Int? {
    var product = 1
    for factor in factors {
        guard factor >= 0 else { return nil }
        let (result, overflow) = product.multipliedReportingOverflow(by: factor)
        guard !overflow else { return nil }
        product = result
    }
    return product
}

/// The sum of `terms` (nil terms or an overflow give nil).
func checkedSum(_ terms: [Int?]) -> Int? {
    var sum = 0
    for term in terms {
        guard let term, term >= 0 else { return nil }
        let (result, overflow) = sum.addingReportingOverflow(term)
        guard !overflow else { return nil }
        sum = result
    }
    return sum
}

/// How much memory the engine lets one working size take before refusing it (LIBRARY/SETTINGS).
public enum MemoryBudget {
    /// Three quarters of the machine's physical memory: what a matting element may sensibly hold
    /// beside the decoder, encoder and the rest of a pipeline.
    public static var `default`: Int {
        let pages = sysconf(Int32(_SC_PHYS_PAGES)), pageSize = sysconf(Int32(_SC_PAGESIZE))
        guard pages > 0, pageSize > 0, let total = checkedProduct([pages, pageSize]) else { return 8 << 30 }
        return total / 4 * 3
    }

    /// "1.5 GiB"-style text for error messages.
    public static func describe(_ bytes: Int) -> String {
        let gib = Double(bytes) / Double(1 << 30)
        return gib >= 1 ? String(format: "%.1f GiB", gib) : String(format: "%.0f MiB", Double(bytes) / Double(1 << 20))
    }
}

/// `count` floats from malloc, or an error the user can act on: the standard library's allocation
/// aborts the process when the machine refuses. Free with `free`.
func allocateFloats(_ count: Int, for what: String) throws -> UnsafeMutablePointer<Float> {
    guard let bytes = checkedProduct([max(count, 1), MemoryLayout<Float>.size]), let raw = malloc(bytes) else {
        throw EngineError.badSettings(detail: "cannot allocate \(count) floats for \(what): not enough memory")
    }
    return raw.bindMemory(to: Float.self, capacity: max(count, 1))
}
