package ec2fake

import (
	"encoding/xml"
	"fmt"
	"net/http"
)

// STS's Query API ("AWS Security Token Service API Reference"): a form POST with Version 2011-06-15,
// answered with <ActionResponse><ActionResult>...</ActionResult><ResponseMetadata/></ActionResponse>; errors
// are <ErrorResponse><Error><Type/><Code/><Message/></Error><RequestId/></ErrorResponse>.

const (
	stsVersion   = "2011-06-15"
	stsNamespace = "https://sts.amazonaws.com/doc/2011-06-15/"
)

type stsHandler func(s *Server, rg *region, f form) (any, *apiError)

// stsActions are the actions the fake serves; any other is InvalidAction.
var stsActions = map[string]stsHandler{
	"GetCallerIdentity": (*Server).getCallerIdentity,
}

// CallerARN is the identity GetCallerIdentity names.
func (s *Server) CallerARN() string { return "arn:aws:iam::" + s.opts.AccountID + ":user/ec2fake" }

type callerIdentityXML struct {
	Arn     string `xml:"Arn"`
	UserID  string `xml:"UserId"`
	Account string `xml:"Account"`
}

// getCallerIdentity names the caller (STS API Reference: GetCallerIdentity).
func (s *Server) getCallerIdentity(_ *region, _ form) (any, *apiError) {
	return callerIdentityXML{Arn: s.CallerARN(), UserID: "AIDAEC2FAKEEXAMPLE001", Account: s.opts.AccountID}, nil
}

func stsErr(code, format string, args ...any) *apiError {
	status := http.StatusBadRequest
	switch code {
	case "InvalidClientTokenId", "SignatureDoesNotMatch", "MissingAuthenticationToken", "AccessDenied":
		status = http.StatusForbidden
	case "InternalFailure":
		status = http.StatusInternalServerError
	}
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

func writeSTS(w http.ResponseWriter, action string, result any, requestID string) {
	type metaXML struct {
		RequestID string `xml:"RequestId"`
	}
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("X-Amzn-Requestid", requestID)
	enc := xml.NewEncoder(w)
	w.WriteHeader(http.StatusOK)
	start := xml.StartElement{Name: xml.Name{Local: action + "Response"}, Attr: []xml.Attr{{Name: xml.Name{Local: "xmlns"}, Value: stsNamespace}}}
	_ = enc.EncodeToken(start)
	_ = enc.EncodeElement(result, xml.StartElement{Name: xml.Name{Local: action + "Result"}})
	_ = enc.EncodeElement(metaXML{requestID}, xml.StartElement{Name: xml.Name{Local: "ResponseMetadata"}})
	_ = enc.EncodeToken(start.End())
	_ = enc.Flush()
}

func writeSTSError(w http.ResponseWriter, e *apiError, requestID string) {
	type errorXML struct {
		Type    string `xml:"Type"`
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	type response struct {
		XMLName   xml.Name `xml:"ErrorResponse"`
		Xmlns     string   `xml:"xmlns,attr"`
		Error     errorXML `xml:"Error"`
		RequestID string   `xml:"RequestId"`
	}
	kind := "Sender"
	if e.status >= 500 {
		kind = "Receiver"
	}
	b, _ := xml.Marshal(response{Xmlns: stsNamespace, Error: errorXML{kind, e.code, e.message}, RequestID: requestID})
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(e.status)
	_, _ = w.Write(b)
}
