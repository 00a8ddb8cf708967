//! A Java method's name from its `Method*`, as HotSpot's perf map writes
//! it (`Method::external_name`): `long Main.spin(long)`.

use super::mem::Mem;
use super::vmstructs::Layout;

fn symbol(mem: &Mem, l: &Layout, sym: u64) -> Result<String, String> {
    let n = mem.u16(sym + l.symbol_length)? as usize;
    let mut b = vec![0u8; n];
    mem.read(sym + l.symbol_body, &mut b)?;
    String::from_utf8(b).map_err(|_| format!("a symbol at {sym:#x} that is not UTF-8"))
}

/// The method's name, or why it could not be read.
pub fn name(mem: &Mem, l: &Layout, method: u64) -> Result<String, String> {
    let cm = mem.u64(method + l.method_const)?;
    let cp = mem.u64(cm + l.const_constants)?;
    let holder = mem.u64(cp + l.pool_holder)?;
    let class = symbol(mem, l, mem.u64(holder + l.klass_name)?)?;
    let entry = |i: u16| -> Result<String, String> { symbol(mem, l, mem.u64(cp + l.pool_size + u64::from(i) * 8)?) };
    let method_name = entry(mem.u16(cm + l.const_name_index)?)?;
    let sig = entry(mem.u16(cm + l.const_signature_index)?)?;
    external(&class, &method_name, &sig).ok_or_else(|| format!("method {method:#x}: bad signature {sig:?}"))
}

/// `java/lang/String` -> `java.lang.String`; a hidden class's suffix
/// (`Main$$Lambda$14+0x0800c01234`) keeps a slash, as the JVM writes it.
fn class_name(internal: &str) -> String {
    let s = internal.replace('/', ".");
    match s.rfind("+0x") {
        Some(i) => format!("{}/{}", &s[..i], &s[i + 1..]),
        None => s,
    }
}

/// One type of a descriptor from its start; the rest after it.
fn field_type(d: &str) -> Option<(String, &str)> {
    let (c, rest) = (d.chars().next()?, &d[1..]);
    let prim = match c {
        'Z' => "boolean",
        'B' => "byte",
        'C' => "char",
        'S' => "short",
        'I' => "int",
        'J' => "long",
        'F' => "float",
        'D' => "double",
        'V' => "void",
        'L' => {
            let end = rest.find(';')?;
            return Some((class_name(&rest[..end]), &rest[end + 1..]));
        }
        '[' => {
            let (t, r) = field_type(rest)?;
            return Some((format!("{t}[]"), r));
        }
        _ => return None,
    };
    Some((prim.to_string(), rest))
}

fn external(class: &str, method: &str, sig: &str) -> Option<String> {
    let mut rest = sig.strip_prefix('(')?;
    let mut params = Vec::new();
    while !rest.starts_with(')') {
        let (t, r) = field_type(rest)?;
        params.push(t);
        rest = r;
    }
    let (ret, _) = field_type(&rest[1..])?;
    Some(format!("{ret} {}.{method}({})", class_name(class), params.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::external;

    #[test]
    fn names_as_the_jvm_writes_them() {
        assert_eq!(external("Main", "spin", "(J)J").unwrap(), "long Main.spin(long)");
        assert_eq!(external("java/lang/Thread", "sleep", "(J)V").unwrap(), "void java.lang.Thread.sleep(long)");
        assert_eq!(
            external("Main", "main", "([Ljava/lang/String;I[[D)Ljava/lang/Object;").unwrap(),
            "java.lang.Object Main.main(java.lang.String[], int, double[][])"
        );
        assert_eq!(external("Main$$Lambda$14+0x0000000800c01234", "run", "()V").unwrap(), "void Main$$Lambda$14/0x0000000800c01234.run()");
        assert!(external("Main", "f", "(Q)V").is_none());
    }
}
