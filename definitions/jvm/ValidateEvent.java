package lambdaplatform.contract;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharsetDecoder;
import java.nio.charset.CoderResult;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.time.DateTimeException;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF3;

/**
 * The event contract's validation (definitions/events.py) in the JVM, as a Spark UDF:
 * (value bytes, Kafka ingest time in ms, contract JSON) → (reason, typed fields...).
 *
 * Every rule, limit and reason text mirrors definitions/events.py, which stays the definition:
 * the contract JSON (definitions.events.contract_json) carries its fields, limits and patterns,
 * and tests/unit/ingest/test_validation_parity.py checks that both give the same verdict, reason
 * and fields for every record of a large hostile corpus. A total function: any input gives a row.
 */
public final class ValidateEvent implements UDF3<byte[], Long, String, Row> {
  private static final long serialVersionUID = 1L;
  private static final Pattern CONTROL = Pattern.compile("[\\x00-\\x1f\\x7f]");
  private static final JsonFactory JSON =
      JsonFactory.builder()
          .streamReadConstraints(
              StreamReadConstraints.builder()
                  .maxNumberLength(Integer.MAX_VALUE)
                  .maxStringLength(Integer.MAX_VALUE)
                  .maxNameLength(Integer.MAX_VALUE)
                  .maxNestingDepth(100_000)
                  .build())
          .disable(JsonFactory.Feature.CANONICALIZE_FIELD_NAMES)
          .disable(JsonFactory.Feature.INTERN_FIELD_NAMES)
          .build();

  private transient String contractText;
  private transient Contract contract;

  @Override
  public Row call(byte[] raw, Long ingestMs, String contractJson) {
    Contract c = contractFor(contractJson);
    Object[] out = new Object[1 + c.fields.size()];
    try {
      validate(c, raw, ingestMs, out);
      out[0] = null;
    } catch (Invalid e) {
      Object[] empty = new Object[out.length];
      empty[0] = bound(c, e.getMessage());
      return RowFactory.create(empty);
    } catch (RuntimeException | StackOverflowError e) {
      Object[] empty = new Object[out.length];
      empty[0] = bound(c, "unprocessable record: " + e.getClass().getSimpleName());
      return RowFactory.create(empty);
    }
    return RowFactory.create(out);
  }

  /** The parsed contract, kept while the text stays the same (Spark gives each task its own
   * instance; a shared one still never mixes two contracts within one call). */
  private Contract contractFor(String text) {
    Contract current = contract;
    if (current == null || !text.equals(contractText)) {
      current = Contract.parse(text);
      contract = current;
      contractText = text;
    }
    return current;
  }

  /** Reasons are at most max_reason_chars code points (definitions.events.InvalidEvent). */
  private static String bound(Contract c, String reason) {
    int limit = c.maxReasonChars;
    if (reason.codePointCount(0, reason.length()) <= limit) {
      return reason;
    }
    return reason.substring(0, reason.offsetByCodePoints(0, limit - 1)) + "…";
  }

  static final class Invalid extends Exception {
    private static final long serialVersionUID = 1L;

    Invalid(String reason) {
      super(reason, null, false, false);
    }
  }

  // --- the contract, as definitions.events.contract_json describes it ---------------------------

  static final class Field {
    String name;
    String kind;
    boolean required;
    long maxLen;
    List<String> choices = new ArrayList<>();
    Pattern pattern;
    int since;
  }

  static final class Contract {
    List<Field> fields = new ArrayList<>();
    Map<String, Boolean> names = new HashMap<>();
    int maxRecordBytes;
    int maxNestingDepth;
    int maxReasonChars;
    int intMaxStrDigits;
    long minEventTimeMs;
    long maxFutureMs;
    long maxFutureS;
    String floorText;
    BigInteger schemaVersion;
    Pattern isoTime;

    /** A pattern the way Python's re.match reads it: `$` before a final "\n" only (UNIX_LINES), not
     * before the other line terminators Java knows (U+0085, U+2028, U+2029). */
    static Pattern pythonPattern(String pattern) {
      return Pattern.compile(pattern, Pattern.UNIX_LINES);
    }

    static Contract parse(String text) {
      try {
        JsonNode doc = new ObjectMapper().readTree(text);
        Contract c = new Contract();
        c.maxRecordBytes = doc.get("max_record_bytes").asInt();
        c.maxNestingDepth = doc.get("max_nesting_depth").asInt();
        c.maxReasonChars = doc.get("max_reason_chars").asInt();
        c.intMaxStrDigits = doc.get("int_max_str_digits").asInt();
        c.minEventTimeMs = doc.get("min_event_time_s").asLong() * 1000L;
        c.maxFutureS = doc.get("max_future_s").asLong();
        c.maxFutureMs = c.maxFutureS * 1000L;
        c.floorText = doc.get("floor_text").asText();
        c.schemaVersion = BigInteger.valueOf(doc.get("schema_version").asLong());
        c.isoTime = pythonPattern(doc.get("time_pattern").asText());
        for (JsonNode f : doc.get("fields")) {
          Field field = new Field();
          field.name = f.get("name").asText();
          field.kind = f.get("kind").asText();
          field.required = f.get("required").asBoolean();
          field.maxLen = f.get("max_len").asLong();
          for (JsonNode choice : f.get("choices")) {
            field.choices.add(choice.asText());
          }
          JsonNode pattern = f.get("pattern");
          field.pattern = pattern == null || pattern.isNull() ? null : pythonPattern(pattern.asText());
          field.since = f.get("since").asInt();
          c.fields.add(field);
          c.names.put(field.name, Boolean.TRUE);
        }
        return c;
      } catch (java.io.IOException e) {
        throw new IllegalArgumentException("unreadable event contract: " + e.getMessage(), e);
      }
    }
  }

  // --- a parsed top-level value: its Python type name and what the rules read -------------------

  static final class Value {
    final String type; // dict, list, str, int, float, bool, NoneType
    final String text; // str: the decoded string; int: the digits as written

    Value(String type, String text) {
      this.type = type;
      this.text = text;
    }
  }

  // --- validate(): the same steps, in the same order, as definitions.events.validate -----------

  private static void validate(Contract c, byte[] raw, Long ingestMs, Object[] out) throws Invalid {
    if (raw == null) {
      throw new Invalid("empty record: no value");
    }
    if (raw.length > c.maxRecordBytes) {
      throw new Invalid("oversized: " + raw.length + " bytes, limit " + c.maxRecordBytes);
    }
    if (isBlank(raw)) {
      throw new Invalid("empty record: no value");
    }
    if (nestingDepth(raw) > c.maxNestingDepth) {
      throw new Invalid("too deeply nested: JSON nesting deeper than " + c.maxNestingDepth);
    }
    String text = decodeUtf8(raw);
    Map<String, Value> doc = parseObject(c, text);
    validateDocument(c, doc, ingestMs == null ? System.currentTimeMillis() : ingestMs, out);
  }

  /** Python's bytes.strip(): ASCII whitespace, vertical tab and form feed included. */
  private static boolean isBlank(byte[] raw) {
    for (byte b : raw) {
      if (b != ' ' && b != '\t' && b != '\n' && b != '\r' && b != 0x0b && b != 0x0c) {
        return false;
      }
    }
    return true;
  }

  /** definitions.events.nesting_depth: brackets outside strings, over the raw bytes. */
  static int nestingDepth(byte[] raw) {
    int depth = 0;
    int deepest = 0;
    boolean inString = false;
    boolean escaped = false;
    for (byte b : raw) {
      if (inString) {
        if (escaped) {
          escaped = false;
        } else if (b == '\\') {
          escaped = true;
        } else if (b == '"') {
          inString = false;
        }
      } else if (b == '"') {
        inString = true;
      } else if (b == '[' || b == '{') {
        depth += 1;
        deepest = Math.max(deepest, depth);
      } else if (b == ']' || b == '}') {
        depth -= 1;
      }
    }
    return deepest;
  }

  private static String decodeUtf8(byte[] raw) throws Invalid {
    CharsetDecoder decoder =
        StandardCharsets.UTF_8
            .newDecoder()
            .onMalformedInput(CodingErrorAction.REPORT)
            .onUnmappableCharacter(CodingErrorAction.REPORT);
    ByteBuffer in = ByteBuffer.wrap(raw);
    CharBuffer out = CharBuffer.allocate(raw.length + 1);
    CoderResult result = decoder.decode(in, out, true);
    if (result.isError()) {
      throw new Invalid("malformed JSON: invalid UTF-8 at byte " + in.position());
    }
    decoder.flush(out);
    out.flip();
    return out.toString();
  }

  /** The whole text must be one JSON value (RFC 8259, as json.loads without NaN/Infinity). */
  private static Map<String, Value> parseObject(Contract c, String text) throws Invalid {
    Map<String, Value> fields = new HashMap<>();
    String rootType;
    String twice = null; // the first name the object gives twice: refused once the text is read whole
    if (!text.isEmpty() && text.charAt(0) == '\ufeff') {
      throw malformed();
    }
    try (JsonParser p = JSON.createParser(text)) {
      JsonToken root = p.nextToken();
      if (root == null) {
        throw malformed();
      }
      rootType = typeOf(root);
      if (root == JsonToken.START_OBJECT) {
        JsonToken t;
        while ((t = p.nextToken()) == JsonToken.FIELD_NAME) {
          String name = p.currentName();
          JsonToken valueToken = p.nextToken();
          String valueText = null;
          if (valueToken == JsonToken.VALUE_STRING) {
            valueText = p.getText();
          } else if (valueToken == JsonToken.VALUE_NUMBER_INT) {
            valueText = p.getText();
            checkDigits(c, valueText);
          } else if (valueToken.isStructStart()) {
            skipChecked(c, p);
          }
          if (fields.put(name, new Value(typeOf(valueToken), valueText)) != null && twice == null) {
            twice = name;
          }
        }
        if (t != JsonToken.END_OBJECT) {
          throw malformed();
        }
      } else if (root == JsonToken.START_ARRAY) {
        skipChecked(c, p);
      } else if (root == JsonToken.VALUE_NUMBER_INT) {
        checkDigits(c, p.getText());
      }
      if (p.nextToken() != null) {
        throw malformed(); // extra data after the value
      }
    } catch (java.io.IOException e) {
      throw malformed();
    }
    if (!"dict".equals(rootType)) {
      throw new Invalid("not a JSON object: got " + rootType);
    }
    if (twice != null) {
      throw new Invalid("duplicate field: " + shown(twice));
    }
    return fields;
  }

  /** Past the container just opened, checking every integer on the way (json.loads reads them all). */
  private static void skipChecked(Contract c, JsonParser p) throws java.io.IOException, Invalid {
    int open = 1;
    while (open > 0) {
      JsonToken t = p.nextToken();
      if (t == null) {
        throw malformed();
      }
      if (t.isStructStart()) {
        open += 1;
      } else if (t.isStructEnd()) {
        open -= 1;
      } else if (t == JsonToken.VALUE_NUMBER_INT) {
        checkDigits(c, p.getText());
      }
    }
  }

  /** Python refuses to read an integer of more than sys.get_int_max_str_digits() digits. */
  private static void checkDigits(Contract c, String digits) throws Invalid {
    int count = digits.startsWith("-") ? digits.length() - 1 : digits.length();
    if (c.intMaxStrDigits > 0 && count > c.intMaxStrDigits) {
      throw malformed();
    }
  }

  private static Invalid malformed() {
    return new Invalid("malformed JSON: not a JSON text (RFC 8259)");
  }

  private static String typeOf(JsonToken token) {
    switch (token) {
      case START_OBJECT:
        return "dict";
      case START_ARRAY:
        return "list";
      case VALUE_STRING:
        return "str";
      case VALUE_NUMBER_INT:
        return "int";
      case VALUE_NUMBER_FLOAT:
        return "float";
      case VALUE_TRUE:
      case VALUE_FALSE:
        return "bool";
      default:
        return "NoneType";
    }
  }

  private static void validateDocument(Contract c, Map<String, Value> doc, long referenceMs, Object[] out)
      throws Invalid {
    List<String> unknown = new ArrayList<>();
    for (String name : doc.keySet()) {
      if (!c.names.containsKey(name)) {
        unknown.add(name);
      }
    }
    if (!unknown.isEmpty()) {
      unknown.sort(ValidateEvent::compareCodePoints);
      StringBuilder shown = new StringBuilder();
      for (int i = 0; i < Math.min(5, unknown.size()); i++) {
        if (i > 0) {
          shown.append(", ");
        }
        shown.append(shown(unknown.get(i)));
      }
      throw new Invalid("unknown field(s): " + shown);
    }
    Long eventTime = null;
    Integer version = null;
    BigInteger versionValue = null;
    String url = null;
    for (int i = 0; i < c.fields.size(); i++) {
      Field field = c.fields.get(i);
      Value value = doc.get(field.name);
      boolean absent = value == null || "NoneType".equals(value.type);
      if (absent || (!field.required && "str".equals(value.type) && value.text.isEmpty())) {
        if (field.required) {
          throw new Invalid("missing field: " + field.name);
        }
        out[1 + i] = null;
        continue;
      }
      if ("int".equals(field.kind)) {
        if (!"int".equals(value.type)) {
          throw new Invalid("mistyped field: " + field.name + " must be an integer, got " + value.type);
        }
        versionValue = new BigInteger(value.text);
        continue;
      }
      if (!"str".equals(value.type)) {
        throw new Invalid("mistyped field: " + field.name + " must be a string, got " + value.type);
      }
      String s = value.text;
      checkString(field, s);
      if ("timestamp".equals(field.kind)) {
        eventTime = parseTime(c, s);
        out[1 + i] = eventTime;
      } else {
        out[1 + i] = s;
        if ("url".equals(field.name)) {
          url = s;
        }
      }
    }
    if (versionValue == null) {
      version = 1;
    } else if (versionValue.compareTo(BigInteger.ONE) < 0 || versionValue.compareTo(c.schemaVersion) > 0) {
      String text = versionValue.toString();
      throw new Invalid(
          "unsupported schema_version: "
              + text.substring(0, Math.min(20, text.length()))
              + " (this platform reads 1 to "
              + c.schemaVersion
              + ")");
    } else {
      version = versionValue.intValue();
    }
    for (int i = 0; i < c.fields.size(); i++) {
      Field field = c.fields.get(i);
      if ("int".equals(field.kind)) {
        out[1 + i] = version;
      } else if (field.since > version && out[1 + i] != null) {
        throw new Invalid(
            "field of a later schema: "
                + field.name
                + " needs schema_version "
                + field.since
                + " or later, got "
                + version);
      }
    }
    if (url == null || !url.startsWith("/")) {
      throw new Invalid("bad url: must be a path starting with '/'");
    }
    if (eventTime < c.minEventTimeMs) {
      throw new Invalid("absurd event_time: before " + c.floorText);
    }
    // Event times lie within years 1..9999, so this side cannot overflow (the ingest time can be
    // any long).
    if (eventTime - c.maxFutureMs > referenceMs) {
      throw new Invalid("absurd event_time: more than " + c.maxFutureS + "s after ingest time");
    }
  }

  private static void checkString(Field field, String s) throws Invalid {
    if (s.isEmpty()) {
      throw new Invalid("empty field: " + field.name);
    }
    int length = s.codePointCount(0, s.length());
    if (field.maxLen > 0 && length > field.maxLen) {
      throw new Invalid(
          "field too long: " + field.name + " has " + length + " characters, limit " + field.maxLen);
    }
    if (hasLoneSurrogate(s)) {
      throw new Invalid(
          "invalid Unicode: " + field.name + " holds a lone surrogate, not a Unicode scalar value");
    }
    if (CONTROL.matcher(s).find()) {
      throw new Invalid("control character: " + field.name + " holds a control character");
    }
    if (!field.choices.isEmpty() && !field.choices.contains(s)) {
      throw new Invalid(
          "bad value: " + field.name + "='" + shown(s) + "', allowed: " + String.join(", ", field.choices));
    }
    if (field.pattern != null && !field.pattern.matcher(s).lookingAt()) {
      throw new Invalid("bad value: " + field.name + "='" + shown(s) + "'");
    }
  }

  private static boolean hasLoneSurrogate(String s) {
    for (int i = 0; i < s.length(); i++) {
      char ch = s.charAt(i);
      if (Character.isHighSurrogate(ch)) {
        if (i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1))) {
          i += 1;
        } else {
          return true;
        }
      } else if (Character.isLowSurrogate(ch)) {
        return true;
      }
    }
    return false;
  }

  /** definitions.events.parse_time, as Python 3.11's datetime.fromisoformat reads the text. */
  private static long parseTime(Contract c, String text) throws Invalid {
    Matcher m = c.isoTime.matcher(text);
    if (!m.lookingAt()) {
      throw new Invalid("mistyped field: event_time not an ISO-8601 time with a zone: '" + shown(text) + "'");
    }
    try {
      int year = Integer.parseInt(text.substring(0, 4));
      int month = Integer.parseInt(text.substring(5, 7));
      int day = Integer.parseInt(text.substring(8, 10));
      int hour = Integer.parseInt(text.substring(11, 13));
      int minute = Integer.parseInt(text.substring(14, 16));
      int second = Integer.parseInt(text.substring(17, 19));
      int pos = 19;
      int micros = 0;
      if (text.charAt(pos) == '.') {
        int start = pos + 1;
        int end = start;
        while (end < text.length() && Character.isDigit(text.charAt(end))) {
          end++;
        }
        String digits = text.substring(start, Math.min(end, start + 6));
        micros = Integer.parseInt((digits + "000000").substring(0, 6));
        pos = end;
      }
      int offsetSeconds = 0;
      char sign = text.charAt(pos);
      if (sign != 'Z') {
        String zone = text.substring(pos + 1).replace(":", "");
        int zoneHours = Integer.parseInt(zone.substring(0, 2));
        int zoneMinutes = Integer.parseInt(zone.substring(2, 4));
        if (zoneHours > 23 || zoneMinutes > 59) {
          throw new DateTimeException("offset out of range");
        }
        offsetSeconds = (sign == '-' ? -1 : 1) * (zoneHours * 3600 + zoneMinutes * 60);
        if (Math.abs(offsetSeconds) >= 86_400) {
          throw new DateTimeException("offset out of range");
        }
      }
      if (year < 1) {
        throw new DateTimeException("year 0 is out of range");
      }
      LocalDateTime local = LocalDateTime.of(year, month, day, hour, minute, second);
      long epochSecond = local.toEpochSecond(ZoneOffset.UTC) - offsetSeconds;
      int utcYear = LocalDateTime.ofEpochSecond(epochSecond, 0, ZoneOffset.UTC).getYear();
      if (utcYear < 1 || utcYear > 9999) {
        throw new DateTimeException("date value out of range");
      }
      long totalMicros = epochSecond * 1_000_000L + micros;
      // Python's timedelta.total_seconds(): one correctly rounded division (a double holds every
      // microsecond count below 2^53 exactly; above that, divide exactly first).
      double seconds =
          Math.abs(totalMicros) < (1L << 53)
              ? (double) totalMicros / 1e6
              : new BigDecimal(totalMicros).movePointLeft(6).doubleValue();
      return (long) (seconds * 1000.0);
    } catch (DateTimeException | NumberFormatException | IndexOutOfBoundsException e) {
      throw new Invalid("mistyped field: event_time not a valid time: '" + shown(text) + "'");
    }
  }

  /** definitions.events.shown: the first 40 code points, escaped as json.dumps(ensure_ascii) does. */
  static String shown(String text) {
    String head = text.codePointCount(0, text.length()) > 40 ? text.substring(0, text.offsetByCodePoints(0, 40)) : text;
    StringBuilder out = new StringBuilder();
    for (int i = 0; i < head.length(); i++) {
      char ch = head.charAt(i);
      switch (ch) {
        case '"':
          out.append("\\\"");
          break;
        case '\\':
          out.append("\\\\");
          break;
        case '\n':
          out.append("\\n");
          break;
        case '\r':
          out.append("\\r");
          break;
        case '\t':
          out.append("\\t");
          break;
        case '\b':
          out.append("\\b");
          break;
        case '\f':
          out.append("\\f");
          break;
        default:
          if (ch >= ' ' && ch <= '~') {
            out.append(ch);
          } else {
            out.append(String.format("\\u%04x", (int) ch));
          }
      }
    }
    return out.toString();
  }

  private static int compareCodePoints(String a, String b) {
    int i = 0;
    int j = 0;
    while (i < a.length() && j < b.length()) {
      int x = a.codePointAt(i);
      int y = b.codePointAt(j);
      if (x != y) {
        return Integer.compare(x, y);
      }
      i += Character.charCount(x);
      j += Character.charCount(y);
    }
    return Integer.compare(a.length() - i, b.length() - j);
  }
}
