package rpl_sql.jvm;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The table rules' code of a row key, as rpl_sql.compile's table code helper gives it: 10 do_table, 11
 * ignore_table, 12 wild do, 13 wild ignore, 14/15 the default (true/false), 0 when the channel has no table
 * rules, NULL for an unknown channel or a NULL name; per channel also a row's whole code (Channel.rowCode).
 * The spec is written by rpl_sql.compile.jvm_spec (its format is documented there); names arrive folded.
 * RowCodeMemo memoises the decisions.
 */
public final class TableRules {
  static final int ANY = -1;
  static final int ONE = -2;
  private static final Map<String, TableRules> PARSED = new ConcurrentHashMap<>();

  final boolean bytes;
  final boolean byIndex;
  private final HashMap<Object, Channel> channels = new HashMap<>();
  /** The statement commands the statement code singles out (rpl_sql.filters.evaluate's sets). */
  final HashSet<String> transactionControl = new HashSet<>();
  final HashSet<String> databaseCommands = new HashSet<>();
  final HashSet<String> exempt = new HashSet<>();
  String dropTrigger = "";
  /** lower_case_table_names' fold, code point to code point (rules.fold_translation); empty: names as they are. */
  private final HashMap<Integer, Integer> fold = new HashMap<>();

  /** One parse per spec in a JVM: every task deserialises the expression. */
  public static TableRules of(String spec) {
    TableRules r = PARSED.get(spec);
    if (r == null) {
      if (PARSED.size() >= 16) {
        PARSED.clear();
      }
      r = new TableRules(spec);
      PARSED.put(spec, r);
    }
    return r;
  }

  private TableRules(String spec) {
    String[] lines = spec.split("\\|", -1);
    if (lines.length < 3 || !lines[0].equals("rpl_sql table rules 3")) {
      throw new IllegalArgumentException("not an rpl_sql table rules spec (version 3)");
    }
    bytes = lines[1].equals("units bytes");
    byIndex = lines[2].equals("channels by index");
    Channel ch = null;
    for (int i = 3; i < lines.length; i++) {
      String[] f = lines[i].isEmpty() ? new String[0] : lines[i].split(" ", -1);
      if (f.length == 0) {
        continue;
      }
      switch (f[0]) {
        case "channel":
          ch = new Channel(f[2].equals("1"), f[3].equals("1"), f[4].equals("1"), f[5].equals("1"));
          String key = unhex(f[1]);
          channels.put(byIndex ? (Object) Integer.valueOf(key) : key, ch);
          break;
        case "dot":
        case "igt":
          for (int j = 1; j < f.length; j++) {
            (f[0].equals("dot") ? ch.dot : ch.igt).add(unhex(f[j]));
          }
          break;
        case "pdb":
        case "rdb":
          for (int j = 1; j < f.length; j++) {
            (f[0].equals("pdb") ? ch.passDb : ch.rejDb).add(unhex(f[j]));
          }
          break;
        case "tx":
        case "dbcmd":
        case "exempt":
          for (int j = 1; j < f.length; j++) {
            (f[0].equals("tx") ? transactionControl : f[0].equals("dbcmd") ? databaseCommands : exempt).add(unhex(f[j]));
          }
          break;
        case "trigger":
          dropTrigger = unhex(f[1]);
          break;
        case "fold":
          int[] from = unhex(f[1]).codePoints().toArray();
          int[] to = unhex(f[2]).codePoints().toArray();
          for (int j = 0; j < from.length; j++) {
            fold.put(from[j], to[j]);
          }
          break;
        case "kmap":
        case "omap":
          for (int j = 1; j + 1 < f.length; j += 2) {
            (f[0].equals("kmap") ? ch.keyMap : ch.outMap).put(unhex(f[j]), unhex(f[j + 1]));
          }
          break;
        case "wdo":
        case "wig":
          for (int j = 1; j < f.length; j++) {
            (f[0].equals("wdo") ? ch.wdo : ch.wig).add(pattern(unhex(f[j])));
          }
          break;
        default:
          throw new IllegalArgumentException("bad spec line: " + lines[i]);
      }
    }
  }

  /** A name as lower_case_table_names compares it: each code point's simple lowercase (rules.fold). */
  String fold(String name) {
    if (fold.isEmpty()) {
      return name;
    }
    StringBuilder out = new StringBuilder(name.length());
    name.codePoints().forEach(cp -> out.appendCodePoint(fold.getOrDefault(cp, cp)));
    return out.toString();
  }

  /** The rules of the channel with this Integer index or String name; null for an unknown channel. */
  Channel channel(Object key) {
    return channels.get(key);
  }

  /** A pattern in LIKE syntax (backslash escapes, a trailing backslash is literal) as units: bytes or code points. */
  private int[] pattern(String p) {
    ArrayList<Integer> out = new ArrayList<>();
    int i = 0;
    while (i < p.length()) {
      int cp = p.codePointAt(i);
      int n = Character.charCount(cp);
      if (cp == '\\' && i + n < p.length()) {
        int lit = p.codePointAt(i + n);
        literal(out, lit);
        i += n + Character.charCount(lit);
        continue;
      }
      if (cp == '%') {
        if (out.isEmpty() || out.get(out.size() - 1) != ANY) {
          out.add(ANY);
        }
      } else if (cp == '_') {
        out.add(ONE);
      } else {
        literal(out, cp);
      }
      i += n;
    }
    int[] a = new int[out.size()];
    for (int j = 0; j < a.length; j++) {
      a[j] = out.get(j);
    }
    return a;
  }

  private void literal(List<Integer> out, int cp) {
    if (!bytes) {
      out.add(cp);
      return;
    }
    for (byte b : new String(Character.toChars(cp)).getBytes(StandardCharsets.UTF_8)) {
      out.add(b & 0xff);
    }
  }

  static int[] units(String s, boolean bytes) {
    if (bytes) {
      byte[] b = s.getBytes(StandardCharsets.UTF_8);
      int[] a = new int[b.length];
      for (int i = 0; i < b.length; i++) {
        a[i] = b[i] & 0xff;
      }
      return a;
    }
    return s.codePoints().toArray();
  }

  /** LIKE over units: ANY any run, ONE exactly one unit, the whole subject. */
  static boolean like(int[] p, int[] s) {
    int pi = 0;
    int si = 0;
    int star = -1;
    int mark = 0;
    while (si < s.length) {
      if (pi < p.length && (p[pi] == ONE || p[pi] == s[si])) {
        pi++;
        si++;
      } else if (pi < p.length && p[pi] == ANY) {
        star = pi++;
        mark = si;
      } else if (star >= 0) {
        pi = star + 1;
        si = ++mark;
      } else {
        return false;
      }
    }
    while (pi < p.length && p[pi] == ANY) {
      pi++;
    }
    return pi == p.length;
  }

  private static String unhex(String h) {
    byte[] b = new byte[h.length() / 2];
    for (int i = 0; i < b.length; i++) {
      b[i] = (byte) Integer.parseInt(h.substring(2 * i, 2 * i + 2), 16);
    }
    return new String(b, StandardCharsets.UTF_8);
  }

  /** One channel's rules: the database rules and rewrite as rpl_sql.compile.channels pre-combines them. */
  static final class Channel {
    final boolean tableRules;
    final boolean defaultTrue;
    final boolean doDb;
    final boolean hasDbRules;
    final HashSet<String> passDb = new HashSet<>();
    final HashSet<String> rejDb = new HashSet<>();
    final HashMap<String, String> keyMap = new HashMap<>();
    final HashMap<String, String> outMap = new HashMap<>();
    final HashSet<String> dot = new HashSet<>();
    final HashSet<String> igt = new HashSet<>();
    final Wild wdo = new Wild();
    final Wild wig = new Wild();

    Channel(boolean tableRules, boolean defaultTrue, boolean doDb, boolean hasDbRules) {
      this.tableRules = tableRules;
      this.defaultTrue = defaultTrue;
      this.doDb = doDb;
      this.hasDbRules = hasDbRules;
    }

    /** 2 do_db miss, 3 ignore_db hit, 16 do_db hit, 17 ignore_db miss, 18 no database rules. */
    int dbCode(String d) {
      if (doDb) {
        return passDb.contains(d) ? 16 : 2;
      }
      if (hasDbRules) {
        return rejDb.contains(d) ? 3 : 17;
      }
      return 18;
    }

    /**
     * The row's code from the database rules, the rewrite and the table rules, as rpl_sql.compile's row code
     * gives it: 2/3 the database rules, 16/17/18 their pass where there are no table rules, else the table
     * code of the rewritten key. `d`, `t` folded.
     */
    int rowCode(String d, String t, boolean bytes) {
      int dc = dbCode(d);
      if (dc == 2 || dc == 3 || !tableRules) {
        return dc;
      }
      return code(keyMap.getOrDefault(d, d) + "." + t, bytes);
    }

    int code(String key, boolean bytes) {
      if (!tableRules) {
        return 0;
      }
      if (dot.contains(key)) {
        return 10;
      }
      if (igt.contains(key)) {
        return 11;
      }
      int w = wildCode(key, bytes);
      return w != 0 ? w : defaultTrue ? 14 : 15;
    }

    /** 12 a wild do rule matches the key, 13 a wild ignore rule, else 0. */
    int wildCode(String key, boolean bytes) {
      if (wdo.isEmpty() && wig.isEmpty()) {
        return 0;
      }
      int[] u = units(key, bytes);
      return wdo.matches(u) ? 12 : wig.matches(u) ? 13 : 0;
    }
  }

  /** Wildcard patterns, indexed by their first unit when it is a literal: a key meets only its bucket. */
  static final class Wild {
    final HashMap<Integer, List<int[]>> byFirst = new HashMap<>();
    final List<int[]> rest = new ArrayList<>();

    void add(int[] p) {
      if (p.length > 0 && p[0] >= 0) {
        byFirst.computeIfAbsent(p[0], x -> new ArrayList<>()).add(p);
      } else {
        rest.add(p);
      }
    }

    boolean isEmpty() {
      return byFirst.isEmpty() && rest.isEmpty();
    }

    boolean matches(int[] s) {
      if (s.length > 0) {
        List<int[]> ps = byFirst.get(s[0]);
        if (ps != null) {
          for (int[] p : ps) {
            if (like(p, s)) {
              return true;
            }
          }
        }
      }
      for (int[] p : rest) {
        if (like(p, s)) {
          return true;
        }
      }
      return false;
    }
  }
}
